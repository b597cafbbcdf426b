//! Reading byte arguments given as hex, `@file` or `-` (standard input).

use std::io::Read;

use anyhow::{Context, bail};

/// Most bytes read from a file or standard input: 64 MiB. Anything larger is no
/// transaction or block we would accept, and reading on would only exhaust memory.
const MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// Reads the bytes an argument names: `0x…` or bare hex inline, `@path` for a file, `-`
/// for standard input. A file or stdin holding hex text is decoded; anything else is
/// taken as raw bytes.
pub fn read_bytes_arg(arg: &str) -> anyhow::Result<Vec<u8>> {
    let raw = if arg == "-" {
        read_limited(std::io::stdin().lock()).context("reading standard input")?
    } else if let Some(path) = arg.strip_prefix('@') {
        let file = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
        read_limited(file).with_context(|| format!("reading {path}"))?
    } else {
        return decode_hex(arg.trim());
    };
    match std::str::from_utf8(&raw) {
        Ok(text) if looks_like_hex(text.trim()) => decode_hex(text.trim()),
        _ => Ok(raw),
    }
}

fn read_limited(reader: impl Read) -> anyhow::Result<Vec<u8>> {
    let mut buf = Vec::new();
    reader.take(MAX_INPUT_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_INPUT_BYTES {
        bail!("input is larger than {MAX_INPUT_BYTES} bytes");
    }
    Ok(buf)
}

fn looks_like_hex(text: &str) -> bool {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_hexdigit())
}

fn decode_hex(text: &str) -> anyhow::Result<Vec<u8>> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    hex::decode(digits).context("input is not valid hex")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inline_hex_with_or_without_prefix() {
        assert_eq!(read_bytes_arg("0x01ff").expect("hex"), vec![1, 255]);
        assert_eq!(read_bytes_arg("01ff").expect("hex"), vec![1, 255]);
        assert!(read_bytes_arg("0x1").is_err());
        assert!(read_bytes_arg("zz").is_err());
    }

    #[test]
    fn reads_files_as_hex_text_or_raw_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hex_file = dir.path().join("tx.hex");
        std::fs::write(&hex_file, "0xc0ffee\n").expect("write");
        let arg = format!("@{}", hex_file.display());
        assert_eq!(read_bytes_arg(&arg).expect("file"), vec![0xc0, 0xff, 0xee]);
        let raw_file = dir.path().join("tx.bin");
        std::fs::write(&raw_file, [0xf8, 0x00, 0x10]).expect("write");
        let arg = format!("@{}", raw_file.display());
        assert_eq!(read_bytes_arg(&arg).expect("file"), vec![0xf8, 0x00, 0x10]);
        assert!(read_bytes_arg("@/nonexistent/stave").is_err());
    }
}
