//! A plugin's exported data, read without loading it: the dynamic symbol
//! table (`.dynsym`, kept by `strip`) of a shared object, and the bytes a
//! symbol names. The `object` crate reads the ELF (32- or 64-bit, either
//! byte order). Loading the .so instead would run its constructors and need
//! Slurm's symbols; `tf-cluster doctor` must work on a broken install.

use std::fmt;

use object::{Object, ObjectSection, ObjectSymbol, SectionKind};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfError(String);

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ElfError {}

type Result<T> = std::result::Result<T, ElfError>;

fn err<T>(what: impl Into<String>) -> Result<T> {
    Err(ElfError(what.into()))
}

/// A parsed ELF file, 32- or 64-bit, either byte order.
pub struct Elf<'a> {
    file: object::File<'a>,
}

impl<'a> Elf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>> {
        if !data.starts_with(b"\x7fELF") {
            return err("not an ELF file");
        }
        match object::File::parse(data) {
            Ok(file) => Ok(Elf { file }),
            Err(e) => err(format!("not a readable ELF file: {e}")),
        }
    }

    /// The bytes of the defined dynamic symbol `name` (its `st_size` bytes;
    /// zeros for a symbol in `.bss`), or None when it is not exported.
    pub fn symbol(&self, name: &str) -> Result<Option<Vec<u8>>> {
        if self.file.dynamic_symbol_table().is_none() {
            return err("no dynamic symbol table");
        }
        let found = self.file.dynamic_symbols().find_map(|sym| {
            let index = sym.section_index()?;
            (sym.name_bytes().ok()? == name.as_bytes()).then_some((sym, index))
        });
        let Some((sym, index)) = found else {
            return Ok(None);
        };
        let section = match self.file.section_by_index(index) {
            Ok(section) => section,
            Err(e) => return err(format!("{name}: {e}")),
        };
        let inside = sym.address().checked_sub(section.address()).filter(|off| {
            off.checked_add(sym.size())
                .is_some_and(|end| end <= section.size())
        });
        if inside.is_none() {
            return err(format!("{name}: outside its section"));
        }
        if section.kind() == SectionKind::UninitializedData {
            return Ok(Some(vec![0; sym.size() as usize]));
        }
        match section.data_range(sym.address(), sym.size()) {
            Ok(Some(bytes)) => Ok(Some(bytes.to_vec())),
            Ok(None) => err(format!("{name}: outside its section")),
            Err(e) => err(format!("{name}: {e}")),
        }
    }

    /// A `uint32_t` symbol such as `plugin_version`.
    pub fn u32_symbol(&self, name: &str) -> Result<Option<u32>> {
        match self.symbol(name)? {
            None => Ok(None),
            Some(b) if b.len() == 4 => {
                let b: [u8; 4] = b.try_into().unwrap();
                Ok(Some(if self.file.is_little_endian() {
                    u32::from_le_bytes(b)
                } else {
                    u32::from_be_bytes(b)
                }))
            }
            Some(b) => err(format!("{name} is {} bytes, not 4", b.len())),
        }
    }

    /// A `char[]` symbol such as `plugin_name`: the text before the first NUL.
    pub fn str_symbol(&self, name: &str) -> Result<Option<String>> {
        Ok(self.symbol(name)?.map(|b| {
            let text = b.split(|&c| c == 0).next().unwrap_or_default();
            String::from_utf8_lossy(text).into_owned()
        }))
    }
}

/// The string tf-cluster's plugin exports its build id under (src/build_id.rs).
pub const BUILD_ID_SYMBOL: &str = "tf_cluster_build_id";

/// What a SPANK plugin file says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// `plugin_name` (tf-cluster's is `tf_cluster`).
    pub name: Option<String>,
    /// `plugin_version`: the SLURM_VERSION_NUMBER it was built against.
    pub version: Option<u32>,
    /// tf-cluster's build id (src/build_id.rs); None for other plugins and
    /// for builds that predate it.
    pub build_id: Option<String>,
}

pub fn plugin_info(data: &[u8]) -> Result<PluginInfo> {
    let elf = Elf::parse(data)?;
    Ok(PluginInfo {
        name: elf.str_symbol("plugin_name")?,
        version: elf.u32_symbol("plugin_version")?,
        build_id: elf.str_symbol(BUILD_ID_SYMBOL)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    /// A C shared object, compiled and stripped (only .dynsym is left, as in
    /// a package build).
    fn compile(dir: &Path, name: &str, c: &str) -> Vec<u8> {
        let src = dir.join(format!("{name}.c"));
        let so = dir.join(format!("{name}.so"));
        std::fs::write(&src, c).unwrap();
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&so)
            .arg(&src)
            .output()
            .expect("cc runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            Command::new("strip")
                .arg(&so)
                .status()
                .expect("strip runs")
                .success()
        );
        std::fs::read(&so).unwrap()
    }

    #[test]
    fn reads_the_symbols_of_c_plugins() {
        let dir = std::env::temp_dir().join(format!("tfc-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = compile(
            &dir,
            "plugin",
            r#"
            const char plugin_name[] = "tf_cluster";
            const char plugin_type[] = "spank";
            const unsigned int plugin_version = 0x0a0b0c;
            const char tf_cluster_build_id[] = "9.9.9 src 00ff";
            unsigned int zeroed;               /* .bss */
            "#,
        );
        let info = plugin_info(&data).unwrap();
        assert_eq!(info.name.as_deref(), Some("tf_cluster"));
        assert_eq!(info.version, Some(0x0a0b0c));
        assert_eq!(info.build_id.as_deref(), Some("9.9.9 src 00ff"));
        let elf = Elf::parse(&data).unwrap();
        assert_eq!(elf.u32_symbol("zeroed").unwrap(), Some(0));
        assert_eq!(
            elf.str_symbol("plugin_type").unwrap().as_deref(),
            Some("spank")
        );
        assert_eq!(elf.symbol("absent").unwrap(), None);
        // A symbol of the wrong size is an error, not a number.
        assert!(elf.u32_symbol("plugin_name").is_err());
        // Another program's plugin: no build id.
        let data = compile(
            &dir,
            "other",
            "const char plugin_name[] = \"other\"; const unsigned int plugin_version = 0x160508;",
        );
        let info = plugin_info(&data).unwrap();
        assert_eq!(
            (info.name.as_deref(), info.version, info.build_id),
            (Some("other"), Some(0x160508), None)
        );
        // A truncated file is refused, never read past its end.
        assert!(plugin_info(&data[..data.len() - 200]).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reads_a_32_bit_plugin() {
        // No 32-bit libc here: -nostdlib links the symbols alone.
        let dir = std::env::temp_dir().join(format!("tfc-elf32-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("plugin.c");
        let so = dir.join("plugin.so");
        std::fs::write(
            &src,
            "const char plugin_name[] = \"tf_cluster\"; const unsigned int plugin_version = 0x180b05;",
        )
        .unwrap();
        let built = Command::new("cc")
            .args(["-m32", "-shared", "-nostdlib", "-fPIC", "-o"])
            .arg(&so)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        if built {
            let info = plugin_info(&std::fs::read(&so).unwrap()).unwrap();
            assert_eq!(info.name.as_deref(), Some("tf_cluster"));
            assert_eq!(info.version, Some(0x180b05));
            assert_eq!(info.build_id, None);
        } else {
            eprintln!("cc -m32 cannot build here: the 32-bit case is untested");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reads_a_real_shared_object() {
        // libc exports malloc (code: its bytes are read, not interpreted).
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .find(|p| Path::new(p).exists());
        if let Some(libc) = libc {
            let data = std::fs::read(libc).unwrap();
            let elf = Elf::parse(&data).unwrap();
            assert!(elf.symbol("malloc").unwrap().is_some_and(|b| !b.is_empty()));
            assert_eq!(elf.symbol("tf_cluster_no_such_symbol").unwrap(), None);
            assert_eq!(plugin_info(&data).unwrap().name, None);
        }
        // The plugin this workspace builds, when it has been built.
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        for profile in ["release", "debug"] {
            let so = target.join(profile).join("libtf_cluster.so");
            if let Ok(data) = std::fs::read(&so) {
                let info = plugin_info(&data).unwrap();
                assert_eq!(info.name.as_deref(), Some("tf_cluster"), "{}", so.display());
                assert!(info.version.is_some(), "{}", so.display());
                assert!(info.build_id.is_some(), "{}", so.display());
            }
        }
    }

    #[test]
    fn refuses_what_is_not_an_elf() {
        assert_eq!(
            Elf::parse(b"#!/bin/sh\n").err().unwrap().to_string(),
            "not an ELF file"
        );
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 3; // neither ELFCLASS32 nor ELFCLASS64
        header[5] = 1;
        assert!(
            Elf::parse(&header)
                .err()
                .unwrap()
                .to_string()
                .starts_with("not a readable ELF file")
        );
        // A header alone: no sections, so no symbols.
        header[4] = 2;
        header[6] = 1; // EV_CURRENT
        header[0x34] = 64; // e_ehsize
        assert_eq!(
            Elf::parse(&header)
                .and_then(|elf| elf.symbol("plugin_name"))
                .err()
                .unwrap()
                .to_string(),
            "no dynamic symbol table"
        );
        // Section headers said to lie past the end of the file.
        header[0x28] = 0xff;
        header[0x3a] = 64;
        header[0x3c] = 3;
        assert!(
            Elf::parse(&header)
                .err()
                .unwrap()
                .to_string()
                .starts_with("not a readable ELF file")
        );
    }
}
