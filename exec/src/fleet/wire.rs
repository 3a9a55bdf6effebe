//! The driver's JSON-lines format on this side (docs/RAY.md, "The driver's
//! format"): an answer, how an exchange ended, and the blobs a job carries.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// The files of a job: relative path -> (blob id, content).
pub type Files = BTreeMap<String, (String, Vec<u8>)>;

/// The git blob id of some bytes, as `git hash-object` computes it (the
/// driver checks each blob against it). Written here rather than taken from
/// `kidiom-syntax`, so that running processes needs no parser and no git.
pub(crate) fn blob_id(bytes: &[u8]) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    h.digest().to_string()
}

/// One answer of the driver.
#[derive(Debug, Deserialize)]
pub(crate) struct Reply {
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) rc: Option<i32>,
    #[serde(default)]
    pub(crate) stdout: String,
    #[serde(default)]
    pub(crate) stderr_tail: String,
    #[serde(default)]
    pub(crate) timed_out: bool,
    #[serde(default)]
    pub(crate) node: Option<String>,
    #[serde(default)]
    pub(crate) gpu: Option<String>,
    #[serde(default)]
    pub(crate) seconds: f64,
    #[serde(default)]
    pub(crate) attempts: u32,
    #[serde(default)]
    pub(crate) failures: Vec<String>,
    #[serde(default)]
    pub(crate) error: Option<String>,
    #[serde(default)]
    pub(crate) harness_version: Option<String>,
    #[serde(default)]
    pub(crate) wall: f64,
    #[serde(default)]
    pub(crate) queued: f64,
    #[serde(default)]
    pub(crate) dispatch: Option<f64>,
}

/// How one job's exchange with the driver ended.
pub(crate) enum Exchange {
    /// The driver's answer.
    Answer(Value),
    /// The driver is gone, or would not take the job: why.
    Lost(String),
    /// No answer long past the deadline: cancelled on the driver.
    Late,
    /// The caller cancelled: cancelled on the driver.
    Cancelled,
}

/// Standard base64 (the content of a file that is not UTF-8).
pub(crate) fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn blob_ids_are_git_hash_object() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(blob_id(b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
    }
}
