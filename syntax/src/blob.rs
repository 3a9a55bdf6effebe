//! Content ids: the git blob id of some bytes, so a file read from disk and
//! the same file read from a repository have one name.

/// The git blob id of some bytes, as `git hash-object` computes it: the
/// SHA-1 of `blob <len>\0` followed by the bytes, in lowercase hex.
pub fn blob_id(bytes: &[u8]) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    h.digest().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_ones_git_gives() {
        // `git hash-object` of an empty file and of "hello\n"
        assert_eq!(blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
        assert_eq!(blob_id(b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
    }
}
