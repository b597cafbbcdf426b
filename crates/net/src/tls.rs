//! Mutual TLS between nodes (rustls, ring): every node holds a certificate signed by the
//! chain's CA and accepts only peers that show one too; the handshake fails before any
//! frame is read. A node's id is the SHA-256 of its certificate's public key
//! (SubjectPublicKeyInfo), and a peer must also be on the allow-list.
//!
//! A validator's certificate holds its ed25519 consensus key itself
//! ([`ChainCa::issue_for_key`]), so its node id follows from its consensus public key
//! ([`ed25519_node_id`]) and a TLS peer is a validator exactly when its id is one of those.

use std::{collections::HashSet, sync::Arc};

use parking_lot::RwLock;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ED25519,
};
use rustls::{
    ClientConfig, RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, pem::PemObject},
    server::WebPkiClientVerifier,
};
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};

use crate::score::NodeId;

/// Why a TLS step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// Making a key or certificate failed.
    #[error("certificate generation failed: {0}")]
    Certificate(String),
    /// rustls refused a configuration.
    #[error("tls configuration: {0}")]
    Config(String),
    /// The peer's certificate is not a valid X.509 certificate.
    #[error("peer certificate does not parse: {0}")]
    BadCertificate(String),
    /// The handshake completed without a peer certificate.
    #[error("the peer showed no certificate")]
    NoPeerCertificate,
    /// A PEM file does not hold what it should.
    #[error("bad PEM: {0}")]
    Pem(String),
    /// The peer's node id is not on the allow-list.
    #[error("node {} is not on the allow-list", hex_id(.0))]
    NotAllowed(NodeId),
    /// The handshake or the socket failed (an unknown CA ends here).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn hex_id(id: &NodeId) -> String {
    id.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn certificate_error(error: rcgen::Error) -> TlsError {
    TlsError::Certificate(error.to_string())
}

/// A chain's certificate authority: it signs every node's certificate.
pub struct ChainCa {
    issuer: Issuer<'static, KeyPair>,
    certificate: CertificateDer<'static>,
}

impl std::fmt::Debug for ChainCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainCa").finish_non_exhaustive()
    }
}

impl ChainCa {
    /// A new CA named `name`, with a fresh key.
    pub fn generate(name: &str) -> Result<Self, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(certificate_error)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(certificate_error)?;
        let certificate = params.self_signed(&key).map_err(certificate_error)?;
        Ok(Self {
            issuer: Issuer::new(params, key),
            certificate: certificate.der().clone(),
        })
    }

    /// A CA saved with [`ChainCa::to_pem`]: its certificate and its key.
    pub fn from_pem(certificate_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let certificate = ca_certificate_from_pem(certificate_pem)?;
        let key = KeyPair::from_pem(key_pem).map_err(|error| TlsError::Pem(error.to_string()))?;
        let issuer = Issuer::from_ca_cert_der(&certificate, key)
            .map_err(|error| TlsError::Pem(error.to_string()))?;
        Ok(Self {
            issuer,
            certificate,
        })
    }

    /// The CA's certificate and key, PEM-encoded (keep the key secret: it admits nodes).
    pub fn to_pem(&self) -> (String, String) {
        (
            certificate_pem(&self.certificate),
            self.issuer.key().serialize_pem(),
        )
    }

    /// The CA certificate (DER), which every node trusts.
    pub fn certificate(&self) -> CertificateDer<'static> {
        self.certificate.clone()
    }

    /// A certificate for node `name` (also its DNS name in TLS), with a fresh key.
    pub fn issue(&self, name: &str) -> Result<NodeIdentity, TlsError> {
        let key = KeyPair::generate().map_err(certificate_error)?;
        self.sign(name, key)
    }

    /// A certificate for node `name` whose key pair is the ed25519 key with this RFC 8032
    /// seed: a validator's consensus key (commonware's `ed25519::PrivateKey` encodes as the
    /// same 32-byte seed). Its node id is then [`ed25519_node_id`] of the public key, so
    /// peers can tell from the TLS handshake which validator they talk to.
    pub fn issue_for_key(
        &self,
        name: &str,
        ed25519_seed: &[u8; 32],
    ) -> Result<NodeIdentity, TlsError> {
        let pkcs8 = ed25519_pkcs8(ed25519_seed);
        let key = KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &PKCS_ED25519)
            .map_err(certificate_error)?;
        self.sign(name, key)
    }

    /// Signs a node certificate for `name` over `key`.
    fn sign(&self, name: &str, key: KeyPair) -> Result<NodeIdentity, TlsError> {
        let mut params =
            CertificateParams::new(vec![name.to_owned()]).map_err(certificate_error)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(certificate_error)?;
        Ok(NodeIdentity {
            name: name.to_owned(),
            certificate: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        })
    }
}

/// DER of the ed25519 algorithm identifier (RFC 8410: OID 1.3.101.112, no parameters).
const ED25519_ALGORITHM: [u8; 7] = [0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70];

/// The PKCS#8 v1 `PrivateKeyInfo` (RFC 8410 §7) of the ed25519 key with this seed:
/// `SEQUENCE { INTEGER 0, AlgorithmIdentifier, OCTET STRING { OCTET STRING seed } }`.
/// v1 carries no public key, so there is nothing to get inconsistent; ring derives it.
fn ed25519_pkcs8(seed: &[u8; 32]) -> PrivatePkcs8KeyDer<'static> {
    let mut der = Vec::with_capacity(48);
    der.extend_from_slice(&[0x30, 0x2e, 0x02, 0x01, 0x00]);
    der.extend_from_slice(&ED25519_ALGORITHM);
    der.extend_from_slice(&[0x04, 0x22, 0x04, 0x20]);
    der.extend_from_slice(seed);
    PrivatePkcs8KeyDer::from(der)
}

/// The node id of any certificate whose key is the ed25519 `public_key` (as
/// [`ChainCa::issue_for_key`] makes them): SHA-256 of its SubjectPublicKeyInfo, which for
/// ed25519 is fixed bytes (RFC 8410 §4) followed by the 32-byte key. Lets a node know a
/// validator's id from the validator set alone, before ever seeing its certificate.
pub fn ed25519_node_id(public_key: &[u8; 32]) -> NodeId {
    let mut spki = Sha256::new();
    // SEQUENCE (42 bytes) { AlgorithmIdentifier, BIT STRING (33 bytes, 0 unused bits) }.
    spki.update([0x30, 0x2a]);
    spki.update(ED25519_ALGORITHM);
    spki.update([0x03, 0x21, 0x00]);
    spki.update(public_key);
    spki.finalize().into()
}

/// A node's certificate and key.
#[derive(Debug)]
pub struct NodeIdentity {
    /// Its name (the certificate's DNS name).
    pub name: String,
    /// Its certificate, signed by the chain's CA.
    pub certificate: CertificateDer<'static>,
    /// Its private key.
    pub key: PrivatePkcs8KeyDer<'static>,
}

impl NodeIdentity {
    /// An identity saved with [`NodeIdentity::to_pem`].
    pub fn from_pem(name: &str, certificate_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let certificate = ca_certificate_from_pem(certificate_pem)?;
        let key = PrivatePkcs8KeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|error| TlsError::Pem(error.to_string()))?;
        Ok(Self {
            name: name.to_owned(),
            certificate,
            key,
        })
    }

    /// Its certificate and key, PEM-encoded.
    pub fn to_pem(&self) -> (String, String) {
        let key = pem::encode_config(
            &pem::Pem::new("PRIVATE KEY", self.key.secret_pkcs8_der().to_vec()),
            pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
        );
        (certificate_pem(&self.certificate), key)
    }

    /// Its node id.
    pub fn node_id(&self) -> Result<NodeId, TlsError> {
        node_id(&self.certificate)
    }
}

/// The first certificate in `pem` (a CA's or a node's).
pub fn ca_certificate_from_pem(pem: &str) -> Result<CertificateDer<'static>, TlsError> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|error| TlsError::Pem(error.to_string()))
}

fn certificate_pem(certificate: &CertificateDer<'_>) -> String {
    pem::encode_config(
        &pem::Pem::new("CERTIFICATE", certificate.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// The node id of a certificate: SHA-256 of its SubjectPublicKeyInfo.
pub fn node_id(certificate: &CertificateDer<'_>) -> Result<NodeId, TlsError> {
    let parsed = webpki::EndEntityCert::try_from(certificate)
        .map_err(|error| TlsError::BadCertificate(format!("{error:?}")))?;
    Ok(Sha256::digest(parsed.subject_public_key_info().as_ref()).into())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca: &CertificateDer<'static>) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    roots
        .add(ca.clone())
        .map_err(|error| TlsError::Config(error.to_string()))?;
    Ok(Arc::new(roots))
}

/// Both sides of a node's TLS: it serves and dials with its identity, trusts only `ca`,
/// and keeps only peers whose node id is on the allow-list. Clones share the list, which
/// may change while the node runs ([`NodeTls::set_allowed`]).
#[derive(Clone)]
pub struct NodeTls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
    allowed: Arc<RwLock<HashSet<NodeId>>>,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("allowed", &self.allowed.read().len())
            .finish_non_exhaustive()
    }
}

impl NodeTls {
    /// TLS for `identity` on the chain whose CA certificate is `ca`.
    pub fn new(
        ca: &CertificateDer<'static>,
        identity: &NodeIdentity,
        allowed: HashSet<NodeId>,
    ) -> Result<Self, TlsError> {
        let config_error = |error: rustls::Error| TlsError::Config(error.to_string());
        let roots = roots(ca)?;
        let key = || PrivateKeyDer::Pkcs8(identity.key.clone_key());
        let chain = vec![identity.certificate.clone()];
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|error| TlsError::Config(error.to_string()))?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key())
            .map_err(config_error)?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key())
            .map_err(config_error)?;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
            allowed: Arc::new(RwLock::new(allowed)),
        })
    }

    /// Makes `allowed` the allow-list for handshakes from now on (connections already made
    /// are the network's to close: `Network::set_allowed`).
    pub fn set_allowed(&self, allowed: HashSet<NodeId>) {
        *self.allowed.write() = allowed;
    }

    /// True if `id` is on the allow-list.
    pub fn is_allowed(&self, id: &NodeId) -> bool {
        self.allowed.read().contains(id)
    }

    fn check(&self, certificates: Option<&[CertificateDer<'static>]>) -> Result<NodeId, TlsError> {
        let first = certificates
            .and_then(<[_]>::first)
            .ok_or(TlsError::NoPeerCertificate)?;
        let id = node_id(first)?;
        if self.is_allowed(&id) {
            Ok(id)
        } else {
            Err(TlsError::NotAllowed(id))
        }
    }

    /// Accepts a peer on `socket`: the handshake (which requires a certificate from the
    /// chain's CA), then the allow-list.
    pub async fn accept(
        &self,
        socket: TcpStream,
    ) -> Result<(TlsStream<TcpStream>, NodeId), TlsError> {
        let stream = self.acceptor.accept(socket).await?;
        let id = self.check(stream.get_ref().1.peer_certificates())?;
        Ok((TlsStream::Server(stream), id))
    }

    /// Dials peer `name` on `socket`, checking its certificate and the allow-list.
    pub async fn connect(
        &self,
        name: &str,
        socket: TcpStream,
    ) -> Result<(TlsStream<TcpStream>, NodeId), TlsError> {
        let server_name = ServerName::try_from(name.to_owned())
            .map_err(|error| TlsError::Config(error.to_string()))?;
        let stream = self.connector.connect(server_name, socket).await?;
        let id = self.check(stream.get_ref().1.peer_certificates())?;
        Ok((TlsStream::Client(stream), id))
    }
}
