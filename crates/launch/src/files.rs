//! Writing the files a node reads (keys, certificates, configs): never over an existing
//! file, and private ones readable by their owner only.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use stave_net::{ChainCa, NodeId};

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

/// Makes a chain CA named `name` for P2P TLS and writes `dir/ca.pem` (its certificate,
/// which every node trusts) and `dir/ca.key` (its key, owner-readable only); `dir` is
/// created, existing files are not overwritten.
pub fn write_ca(dir: &Path, name: &str) -> Result<ChainCa, LaunchError> {
    let ca = ChainCa::generate(name).map_err(LaunchError::tls(format!("making the CA {name}")))?;
    let (certificate, key) = ca.to_pem();
    create_dir(dir)?;
    write_new(&dir.join("ca.pem"), &certificate, false)?;
    write_new(&dir.join("ca.key"), &key, true)?;
    Ok(ca)
}

/// A node's P2P certificate, as [`issue_node`] wrote it.
#[derive(Debug, Clone)]
pub struct IssuedNode {
    /// The node id other nodes' `allowed` lists name.
    pub node_id: NodeId,
    /// The certificate file, `node.pem`.
    pub cert: PathBuf,
    /// The private key file, `node.key` (owner-readable only).
    pub key: PathBuf,
}

/// Issues node `name`'s P2P certificate from the CA in `ca_dir` (`ca.pem` and `ca.key`,
/// as `stave keys ca` writes them) and writes `out/node.pem`, `out/node.key` and a copy
/// of `ca.pem` (`out` is created; existing files are not overwritten).
pub fn issue_node(ca_dir: &Path, name: &str, out: &Path) -> Result<IssuedNode, LaunchError> {
    let read = |file: &str| {
        let path = ca_dir.join(file);
        std::fs::read_to_string(&path).map_err(LaunchError::io(format!(
            "reading {} (make a CA with `stave keys ca --out DIR`)",
            path.display()
        )))
    };
    let ca_pem = read("ca.pem")?;
    let ca = ChainCa::from_pem(&ca_pem, &read("ca.key")?).map_err(LaunchError::tls(format!(
        "loading the CA in {}",
        ca_dir.display()
    )))?;
    let issuing = || LaunchError::tls(format!("issuing a certificate for {name}"));
    let identity = ca.issue(name).map_err(issuing())?;
    let node_id = identity.node_id().map_err(issuing())?;
    let (certificate, key) = identity.to_pem();
    create_dir(out)?;
    let (cert_path, key_path) = (out.join("node.pem"), out.join("node.key"));
    write_new(&cert_path, &certificate, false)?;
    write_new(&key_path, &key, true)?;
    write_new(&out.join("ca.pem"), &ca_pem, false)?;
    Ok(IssuedNode {
        node_id,
        cert: cert_path,
        key: key_path,
    })
}
