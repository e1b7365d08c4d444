//! bashkit's commit, shell-state and capability objects, encoded here as
//! bashkit encodes them (canonical JSON; the id, SHA-256 of the kind byte
//! and the payload), for a commit whose files are its parent's: what lets
//! `Session.commit/2` of a session whose files did not change hash a few
//! KiB instead of every file. `encodes_as_bashkit_does` checks the ids
//! against `Bash::commit`.

use std::collections::{BTreeMap, HashMap};

use bashkit::{Bash, CapabilityFingerprint, CommitId, CommitObject, ObjectId, SnapshotOptions};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{COMPRESSION_NONE, KIND_CAPS, KIND_COMMIT, KIND_SHELL};

/// A commit of `bash`'s state now over the files of `tree`, made by an
/// interpreter with capabilities `caps` (known: the interpreter's builtins
/// and filesystem do not change; `None`: encoded here): its id and its
/// objects (the commit, its shell state, new capabilities) as storage
/// blobs.
pub(super) fn commit_over(
    bash: &Bash,
    tree: ObjectId,
    caps: Option<ObjectId>,
    parents: Vec<CommitId>,
    meta: BTreeMap<String, String>,
) -> Result<(CommitId, HashMap<ObjectId, Vec<u8>>), String> {
    let state = bash.snapshot_state(SnapshotOptions {
        exclude_filesystem: true,
        exclude_functions: false,
    });
    let mut objects = HashMap::new();
    let shell = encode(KIND_SHELL, &state.shell, &mut objects)?;
    let caps = match caps {
        Some(caps) => caps,
        None => encode(
            KIND_CAPS,
            &CapabilityFingerprint::capture(bash),
            &mut objects,
        )?,
    };
    let commit = CommitObject {
        parents,
        tree: Some(tree),
        shell,
        caps,
        session_commands: state.session_commands,
        session_exec_calls: state.session_exec_calls,
        meta,
    };
    let id = encode(KIND_COMMIT, &commit, &mut objects)?;
    Ok((id, objects))
}

/// Add `value` as an object of `kind` to `objects`; its id.
fn encode(
    kind: u8,
    value: &impl Serialize,
    objects: &mut HashMap<ObjectId, Vec<u8>>,
) -> Result<ObjectId, String> {
    let value = serde_json::to_value(value).map_err(|e| e.to_string())?;
    let mut blob = vec![COMPRESSION_NONE, kind];
    canonical(&value, &mut blob);
    let digest: [u8; 32] = Sha256::digest(&blob[1..]).into();
    let id = ObjectId::from_bytes(digest);
    objects.insert(id, blob);
    Ok(id)
}

/// JSON with object keys sorted and no whitespace.
fn canonical(value: &serde_json::Value, out: &mut Vec<u8>) {
    match value {
        serde_json::Value::Object(map) => {
            let sorted: BTreeMap<&String, &serde_json::Value> = map.iter().collect();
            out.push(b'{');
            for (i, (key, value)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(
                    serde_json::Value::String(key.clone())
                        .to_string()
                        .as_bytes(),
                );
                out.push(b':');
                canonical(value, out);
            }
            out.push(b'}');
        }
        serde_json::Value::Array(items) => {
            out.push(b'[');
            for (i, value) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(value, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::runtime::block_on;
    use bashkit::{CommitOptions, SnapshotGraph};

    #[test]
    fn encodes_as_bashkit_does() {
        let mut bash = Bash::new();
        block_on(
            bash.exec("mkdir -p /w && echo data > /w/f; X=1; f() { echo \"$1\"; }; alias l=ls"),
        )
        .unwrap();
        let base = bash.commit(CommitOptions::new()).unwrap();
        let objects: HashMap<_, _> = base.objects().map(|(id, b)| (id, b.to_vec())).collect();
        let tree = SnapshotGraph::read_commit(base.id(), &objects)
            .unwrap()
            .tree
            .unwrap();
        block_on(bash.exec("Y=2; cd /w")).unwrap();

        let theirs = bash
            .commit(CommitOptions::new().parent(base.id()).meta("k", "v"))
            .unwrap();
        let meta = BTreeMap::from([("k".to_string(), "v".to_string())]);
        let (ours, blobs) = commit_over(&bash, tree, None, vec![base.id()], meta.clone()).unwrap();
        let caps = SnapshotGraph::read_commit(base.id(), &objects)
            .unwrap()
            .caps;
        let (known, _) = commit_over(&bash, tree, Some(caps), vec![base.id()], meta).unwrap();
        assert_eq!(known, ours);
        assert_eq!(ours, theirs.id());
        let mut store = objects;
        store.extend(blobs);
        let mut fresh = Bash::new();
        fresh
            .checkout(ours, &store, bashkit::CheckoutPolicy::Superset)
            .unwrap();
        let out = block_on(fresh.exec("echo $X$Y; pwd; cat f; f hi")).unwrap();
        assert_eq!(out.stdout, "12\n/w\ndata\nhi\n");
    }
}
