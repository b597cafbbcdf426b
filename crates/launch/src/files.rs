//! Writing the files a node reads (keys, certificates, configs): never over an existing
//! file, and private ones readable by their owner only.

use std::{io::Write, path::Path};

use crate::LaunchError;

/// Creates `dir` and its parents (an existing one is fine).
pub fn create_dir(dir: &Path) -> Result<(), LaunchError> {
    std::fs::create_dir_all(dir).map_err(LaunchError::io(format!("creating {}", dir.display())))
}

/// Writes a new file (never overwriting one); a `private` one only its owner can read.
pub fn write_new(path: &Path, contents: &str, private: bool) -> Result<(), LaunchError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    let mut file = options.open(path).map_err(LaunchError::io(format!(
        "creating {} (it must not exist yet)",
        path.display()
    )))?;
    file.write_all(contents.as_bytes())
        .map_err(LaunchError::io(format!("writing {}", path.display())))
}
