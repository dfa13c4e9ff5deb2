//! What `env` and `preview` print: a task's variables as one JSON object,
//! or every rank as a table, with the notes that go with them.

use tf_cluster_core::{Error, Gathered, Node, Result};

/// What `env` or `preview` prints: stdout, then notes for stderr (`env`).
pub struct Output {
    pub out: String,
    pub notes: Vec<String>,
}

/// `env` (the variables of `step.procid`) or `preview` (every rank) of a
/// step, real or previewed; `notes` after the table, or on stderr for env.
pub fn render(
    explain: bool,
    gathered: Gathered,
    preview_rank: Option<u32>,
    notes: Vec<String>,
) -> Result<Output> {
    let node = match gathered {
        Gathered::Step(handed) => Node::prepare_handed(*handed)?,
        Gathered::Refused => return Err(Error::new("srun refused this step")),
        Gathered::Skip => None,
    };
    // srun left the step alone or left out each framework it asks for.
    let Some(node) = node else {
        return Ok(Output {
            out: match explain {
                true => "srun leaves this step alone: the plugin sets nothing".into(),
                false => "{}".into(),
            },
            notes,
        });
    };
    if !explain {
        let Some(rank) = node.step().procid else {
            return Err(Error::new(
                "SLURM_PROCID is not set: not inside a Slurm step?",
            ));
        };
        let injection = node.task(rank, None, None)?;
        let vars: serde_json::Map<String, serde_json::Value> = injection
            .vars()
            .map(|(name, value)| (name.to_string(), value.into()))
            .collect();
        let mut notes = notes;
        if let Some(rank) = preview_rank {
            notes.insert(0, format!("the variables of rank {rank}"));
        }
        return Ok(Output {
            out: serde_json::Value::Object(vars).to_string(),
            notes,
        });
    }
    let explained = node.rank_table()?;
    let mut out = table(&explained.rows);
    for line in explained.summaries.iter().chain(&notes) {
        out.push('\n');
        out.push_str(line);
    }
    Ok(Output { out, notes: vec![] })
}

/// Rows as columns padded to their widest cell; the first row is the header.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.pop();
    out
}
