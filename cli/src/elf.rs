//! Just enough of ELF to read a plugin's exported data without loading it:
//! the dynamic symbol table (`.dynsym`, kept by `strip`) of a 64-bit
//! little-endian shared object (x86-64, aarch64, ppc64le), and the bytes a
//! symbol names. Loading the .so instead would run its constructors and need
//! Slurm's symbols; `tf-cluster doctor` must work on a broken install.

use std::fmt;

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

const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;
const SHN_LORESERVE: u16 = 0xff00;

struct Section {
    kind: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
}

/// A parsed 64-bit little-endian ELF file.
pub struct Elf<'a> {
    data: &'a [u8],
    sections: Vec<Section>,
}

fn bytes(data: &[u8], at: u64, len: u64) -> Result<&[u8]> {
    let end = at.checked_add(len).filter(|&e| e <= data.len() as u64);
    match end {
        Some(end) => Ok(&data[at as usize..end as usize]),
        None => err(format!("truncated file: {len} bytes at offset {at}")),
    }
}

fn u16_at(data: &[u8], at: u64) -> Result<u16> {
    Ok(u16::from_le_bytes(bytes(data, at, 2)?.try_into().unwrap()))
}

fn u32_at(data: &[u8], at: u64) -> Result<u32> {
    Ok(u32::from_le_bytes(bytes(data, at, 4)?.try_into().unwrap()))
}

fn u64_at(data: &[u8], at: u64) -> Result<u64> {
    Ok(u64::from_le_bytes(bytes(data, at, 8)?.try_into().unwrap()))
}

impl<'a> Elf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>> {
        if data.len() < 64 || &data[..4] != b"\x7fELF" {
            return err("not an ELF file");
        }
        if data[4] != 2 || data[5] != 1 {
            return err("not a 64-bit little-endian ELF file");
        }
        let shoff = u64_at(data, 0x28)?;
        let shentsize = u64::from(u16_at(data, 0x3a)?);
        let shnum = u64::from(u16_at(data, 0x3c)?);
        if shoff == 0 || shnum == 0 {
            return err("no section headers");
        }
        if shentsize < 64 {
            return err(format!("section header size {shentsize}"));
        }
        let mut sections = Vec::with_capacity(shnum as usize);
        for i in 0..shnum {
            let at = shoff + i * shentsize;
            bytes(data, at, 64)?;
            sections.push(Section {
                kind: u32_at(data, at + 4)?,
                addr: u64_at(data, at + 16)?,
                offset: u64_at(data, at + 24)?,
                size: u64_at(data, at + 32)?,
                link: u32_at(data, at + 40)?,
            });
        }
        Ok(Elf { data, sections })
    }

    /// The bytes of the defined dynamic symbol `name` (its `st_size` bytes;
    /// zeros for a symbol in `.bss`), or None when it is not exported.
    pub fn symbol(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let Some(dynsym) = self.sections.iter().find(|s| s.kind == SHT_DYNSYM) else {
            return err("no dynamic symbol table");
        };
        let Some(strtab) = self.sections.get(dynsym.link as usize) else {
            return err("dynamic symbol table without string table");
        };
        let strings = bytes(self.data, strtab.offset, strtab.size)?;
        let table = bytes(self.data, dynsym.offset, dynsym.size)?;
        for sym in table.chunks_exact(24) {
            let name_at = u32_at(sym, 0)? as usize;
            let shndx = u16_at(sym, 6)?;
            if shndx == SHN_UNDEF || shndx >= SHN_LORESERVE {
                continue;
            }
            let Some(rest) = strings.get(name_at..) else {
                continue;
            };
            let sym_name = rest.split(|&b| b == 0).next().unwrap_or_default();
            if sym_name != name.as_bytes() {
                continue;
            }
            let value = u64_at(sym, 8)?;
            let size = u64_at(sym, 16)?;
            let Some(section) = self.sections.get(shndx as usize) else {
                return err(format!("{name}: section {shndx} does not exist"));
            };
            let inside = value
                .checked_sub(section.addr)
                .filter(|off| off.checked_add(size).is_some_and(|end| end <= section.size));
            let Some(off) = inside else {
                return err(format!("{name}: outside its section"));
            };
            if section.kind == SHT_NOBITS {
                return Ok(Some(vec![0; size as usize]));
            }
            return Ok(Some(bytes(self.data, section.offset + off, size)?.to_vec()));
        }
        Ok(None)
    }

    /// A `uint32_t` symbol such as `plugin_version`.
    pub fn u32_symbol(&self, name: &str) -> Result<Option<u32>> {
        match self.symbol(name)? {
            None => Ok(None),
            Some(b) if b.len() == 4 => Ok(Some(u32::from_le_bytes(b.try_into().unwrap()))),
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
    fn refuses_what_is_not_a_64_bit_little_endian_elf() {
        assert_eq!(
            Elf::parse(b"#!/bin/sh\n").err().unwrap().to_string(),
            "not an ELF file"
        );
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 1; // ELFCLASS32
        header[5] = 1;
        assert_eq!(
            Elf::parse(&header).err().unwrap().to_string(),
            "not a 64-bit little-endian ELF file"
        );
        header[4] = 2;
        assert_eq!(
            Elf::parse(&header).err().unwrap().to_string(),
            "no section headers"
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
                .starts_with("truncated file")
        );
    }
}
