//! Every path flag of every subcommand, by what it names, and the one check they all go
//! through before a command runs: an input that is a FIFO, a device, a socket or (for a
//! file) a directory is refused by what it is, naming it, before a byte is read (the
//! readers in the library refuse them again, and bound every read:
//! [`ctxprune::io::file`]); an output that cannot be written is refused before any work,
//! so nothing is printed by a command that then fails to write its file.
//!
//! A new path flag must be listed in [`PATHS`]: the tests below walk the clap command
//! tree and fail on a flag of type `PathBuf` (or with a path value hint) that is not here,
//! and on a listed flag with no case in `tests/cli_paths.tsv` (which runs each against a
//! FIFO, `/dev/zero` and an unwritable path).

use ctxprune::{Error, Result};
use std::path::Path;

/// What a path flag names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A file that is read.
    File,
    /// An embeddings file, `FILE` or `FILE.safetensors:NAME`.
    Embeddings,
    /// A tokenizer: a built-in encoding's name, or a `tokenizer.json` file.
    Tokenizer,
    /// A directory that is read (a model, a trajectories directory).
    Dir,
    /// A file that is written.
    Out,
    /// A directory written into.
    OutDir,
}

impl Kind {
    /// The name `tests/cli_paths.tsv` gives the kind.
    #[cfg(test)]
    fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Embeddings => "embeddings",
            Kind::Tokenizer => "tokenizer",
            Kind::Dir => "dir",
            Kind::Out => "out",
            Kind::OutDir => "outdir",
        }
    }
}

/// Every path flag: the subcommand (names joined by spaces), the argument's id (its field
/// name) and what it names.
pub(crate) const PATHS: &[(&str, &str, Kind)] = &[
    ("select", "embeddings", Kind::Embeddings),
    ("select", "query", Kind::File),
    ("select", "texts", Kind::File),
    ("select", "costs", Kind::File),
    ("select", "model", Kind::Dir),
    ("select", "tokenizer", Kind::Tokenizer),
    ("rerank", "embeddings", Kind::Embeddings),
    ("rerank", "query", Kind::File),
    ("rerank", "model", Kind::Dir),
    ("rerank", "oracle_scores", Kind::File),
    ("rerank", "texts", Kind::File),
    ("rerank", "tokens", Kind::File),
    ("rerank", "tokenizer", Kind::Tokenizer),
    ("eval", "plot", Kind::Out),
    ("eval", "set", Kind::File),
    ("mask", "tokenizer", Kind::Tokenizer),
    ("mask", "stats", Kind::Out),
    ("mask", "model", Kind::Dir),
    ("cost flops", "config", Kind::File),
    ("pipeline", "config", Kind::File),
    ("pipeline", "input", Kind::File),
    ("pipeline", "model", Kind::Dir),
    ("pipeline train", "log", Kind::File),
    ("pipeline train", "out", Kind::Out),
    ("pipeline train", "model", Kind::Dir),
    ("probe", "trajectories", Kind::Dir),
    ("probe", "labels", Kind::File),
    ("probe", "plot", Kind::Out),
    ("probe", "json", Kind::Out),
    ("probe", "tokenizer", Kind::Tokenizer),
    ("attention segment", "prompt", Kind::File),
    ("attention segment", "tokenizer", Kind::File),
    ("attention segment", "out", Kind::Out),
    ("attention mass", "tensors", Kind::File),
    ("attention mass", "segments", Kind::File),
    ("attention mass", "json", Kind::Out),
    ("attention mass", "heatmap", Kind::Out),
    ("attention decay", "masses", Kind::File),
    ("attention decay", "json", Kind::Out),
    ("attention decay", "png", Kind::Out),
    ("kernels", "out", Kind::OutDir),
    ("embed", "model", Kind::Dir),
    ("embed", "input", Kind::File),
    ("embed", "out", Kind::Out),
    ("make-pool", "out", Kind::OutDir),
    ("count-tokens", "input", Kind::File),
    ("count-tokens", "tokenizer", Kind::Tokenizer),
];

/// Checks every path flag given on the command line (see the module docs).
pub(crate) fn check(matches: &clap::ArgMatches) -> Result<()> {
    let mut names: Vec<&str> = Vec::new();
    let mut m = matches;
    while let Some((name, sub)) = m.subcommand() {
        names.push(name);
        m = sub;
        let cmd = names.join(" ");
        for &(_, id, kind) in PATHS.iter().filter(|(c, _, _)| *c == cmd) {
            if let Ok(Some(values)) = m.try_get_raw(id) {
                for v in values {
                    check_one(kind, Path::new(v))?;
                }
            }
        }
    }
    Ok(())
}

/// An input must be what it is named as when it exists (a missing one is reported by the
/// command that reads it, in its own words); an output must be writable.
fn check_one(kind: Kind, path: &Path) -> Result<()> {
    use ctxprune::io::file;
    let is = |want_dir: bool| -> Result<()> {
        match std::fs::metadata(path) {
            Err(_) => Ok(()),
            Ok(_) if want_dir => file::dir(path),
            Ok(_) => file::open(path, ctxprune::limits::PARTS_FILE_BYTES)
                .map(drop)
                .or_else(|e| match e {
                    // Emptiness is the reader's to report, with what the file should hold.
                    Error::Format { ref msg, .. } if msg == "file is empty" => Ok(()),
                    e => Err(e),
                }),
        }
    };
    match kind {
        Kind::File => is(false),
        Kind::Embeddings => check_one(Kind::File, ctxprune::io::split_spec(&path.to_string_lossy()).0),
        Kind::Tokenizer if path.to_string_lossy().ends_with(".json") => is(false),
        Kind::Tokenizer => Ok(()),
        Kind::Dir => is(true),
        Kind::Out => file::output(path),
        Kind::OutDir => match std::fs::metadata(path) {
            Ok(meta) if !meta.is_dir() => file::output_dir(path),
            _ => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument of every subcommand that names a path (a `PathBuf`, or a path value
    /// hint): (subcommand, id).
    fn path_args() -> Vec<(String, String)> {
        fn walk(c: &clap::Command, names: &mut Vec<String>, out: &mut Vec<(String, String)>) {
            if !names.is_empty() {
                for a in c.get_arguments() {
                    if matches!(
                        a.get_value_hint(),
                        clap::ValueHint::AnyPath | clap::ValueHint::FilePath | clap::ValueHint::DirPath
                    ) {
                        out.push((names.join(" "), a.get_id().to_string()));
                    }
                }
            }
            for s in c.get_subcommands() {
                names.push(s.get_name().to_string());
                walk(s, names, out);
                names.pop();
            }
        }
        let mut out = Vec::new();
        walk(&crate::Cli::command(), &mut Vec::new(), &mut out);
        out
    }

    #[test]
    fn every_path_flag_is_listed_and_every_listed_flag_exists() {
        let found = path_args();
        let listed: Vec<(String, String)> = PATHS
            .iter()
            .map(|(c, id, _)| (c.to_string(), id.to_string()))
            .collect();
        for f in &found {
            assert!(listed.contains(f), "path flag {f:?} is not in paths::PATHS");
        }
        // Without the embed feature the --model flags are not built.
        #[cfg(feature = "embed")]
        for l in &listed {
            assert!(
                found.contains(l),
                "paths::PATHS lists {l:?}, which is not a path flag"
            );
        }
    }

    #[test]
    fn every_listed_flag_has_a_case_in_cli_paths_tsv() {
        let tsv = include_str!("../../../tests/cli_paths.tsv");
        let rows: Vec<Vec<&str>> = tsv
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| l.split('\t').collect())
            .collect();
        for &(cmd, id, kind) in PATHS {
            assert!(
                rows.iter()
                    .any(|r| r.len() >= 3 && r[0] == cmd && r[1] == id && r[2] == kind.name()),
                "tests/cli_paths.tsv has no case for {cmd} {id} ({})",
                kind.name()
            );
        }
    }
}
