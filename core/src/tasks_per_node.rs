//! SLURM_STEP_TASKS_PER_NODE: task counts in node-list order, runs compressed
//! as `N(xM)`: `2(x3),1` → [2, 2, 2, 1].

use super::error::{Result, bail, shown};
use super::number::parse_u32;

/// Expands the list, refusing more than `max_nodes` entries.
pub fn parse(text: &str, max_nodes: usize) -> Result<Vec<u32>> {
    if text.is_empty() {
        bail!("SLURM_STEP_TASKS_PER_NODE is empty");
    }
    let mut counts = Vec::new();
    for item in text.split(',') {
        let (count, repeat) = match split_repeat(item) {
            None => (item, "1"),
            Some((count, rest)) => match rest.strip_suffix(')') {
                Some(repeat) => (count, repeat),
                None => bail!(
                    "bad SLURM_STEP_TASKS_PER_NODE {}: {item:?} is not N or N(xM)",
                    shown(text)
                ),
            },
        };
        let (Some(count), Some(repeat)) = (parse_u32(count), parse_u32(repeat)) else {
            bail!(
                "bad SLURM_STEP_TASKS_PER_NODE {}: {item:?} is not N or N(xM)",
                shown(text)
            );
        };
        if count == 0 || repeat == 0 {
            bail!(
                "bad SLURM_STEP_TASKS_PER_NODE {}: {item:?} has a zero",
                shown(text)
            );
        }
        if counts.len() + repeat as usize > max_nodes {
            bail!(
                "bad SLURM_STEP_TASKS_PER_NODE {}: more than {max_nodes} nodes",
                shown(text)
            );
        }
        counts.extend(std::iter::repeat_n(count, repeat as usize));
    }
    Ok(counts)
}

/// `item.split_once("(x")`, without a substring searcher for two bytes.
fn split_repeat(item: &str) -> Option<(&str, &str)> {
    let at = item.as_bytes().windows(2).position(|w| w == b"(x")?;
    Some((&item[..at], &item[at + 2..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(text: &str) -> Vec<u32> {
        parse(text, 1 << 20).unwrap()
    }

    // TensorFlow's own test cases.
    #[test]
    fn tensorflow_cases() {
        assert_eq!(counts("2"), [2]);
        assert_eq!(counts("2,1,3"), [2, 1, 3]);
        assert_eq!(counts("3(x2),2,1"), [3, 3, 2, 1]);
        assert_eq!(counts("3(x2),2,11(x4)"), [3, 3, 2, 11, 11, 11, 11]);
        assert_eq!(counts("13(x10)"), [13; 10]);
    }

    #[test]
    fn malformed_lists_are_refused() {
        for bad in [
            "", "2(x2", "2x2", "(x2)", "a", "2,", ",2", "-1", "0", "2(x0)", "2(x2)3", " 2",
        ] {
            let e = parse(bad, 100).unwrap_err().to_string();
            assert!(e.contains("SLURM_STEP_TASKS_PER_NODE"), "{bad}: {e}");
        }
    }

    #[test]
    fn size_is_bounded() {
        assert!(
            parse("1(x4000000000)", 1000)
                .unwrap_err()
                .to_string()
                .contains("more than 1000")
        );
        assert_eq!(parse("1(x1000)", 1000).unwrap().len(), 1000);
    }
}
