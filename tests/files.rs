//! The one file-open contract (`io::file`): regular files only, refused by what they are
//! before a byte is read; a cap per read, refused naming the file and the cap; the
//! directory and output checks.

use ctxprune::io::file;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs `f` on a thread and waits at most 20 s for it: a read that blocks (a FIFO) or never
/// ends (`/dev/zero`) fails the test instead of hanging it.
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("still running after 20 s: the read blocked")
}

fn fifo(dir: &Path) -> PathBuf {
    let p = dir.join("pipe");
    let ok = std::process::Command::new("mkfifo").arg(&p).status();
    assert!(ok.is_ok_and(|s| s.success()), "mkfifo failed");
    p
}

#[test]
fn reads_refuse_fifos_devices_and_directories_by_what_they_are() {
    let d = tempfile::tempdir().unwrap();
    let pipe = fifo(d.path());
    let link = d.path().join("zero.npy");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    for (p, what) in [
        (pipe.clone(), "a named pipe"),
        (link.clone(), "a character device"),
        (d.path().to_path_buf(), "a directory"),
    ] {
        let q = p.clone();
        let e = bounded(move || file::read(&q, u64::MAX).unwrap_err().to_string());
        assert_eq!(e, format!("{}: is {what}, not a regular file", p.display()));
        let q = p.clone();
        let e = bounded(move || file::read_text(&q, 10).unwrap_err().to_string());
        assert!(e.contains(what), "{e}");
    }
    // The loaders go through it too.
    let l = link.display().to_string();
    let e = bounded(move || ctxprune::io::load_embeddings(&l).unwrap_err().to_string());
    assert!(
        e.ends_with("zero.npy: is a character device, not a regular file"),
        "{e}"
    );
    let q = pipe.clone();
    let e = bounded(move || {
        ctxprune::attention::tensors::TensorFile::open(&q, None)
            .err()
            .unwrap()
            .to_string()
    });
    assert!(e.ends_with("pipe: is a named pipe, not a regular file"), "{e}");
}

#[test]
fn a_file_past_its_cap_is_refused_naming_the_cap_before_it_is_read() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("big.json");
    // A sparse file: its length, not its blocks.
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(ctxprune::limits::CONFIG_FILE_BYTES + 1).unwrap();
    drop(f);
    let e = file::read(&p, ctxprune::limits::CONFIG_FILE_BYTES)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "{}: is 67108865 bytes, more than the 67108864 bytes a file of this kind may hold",
            p.display()
        )
    );
    // A stages file is a configuration: the same cap through its reader.
    let e = ctxprune::pipeline::stages::Stages::load(&p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than the 67108864 bytes"), "{e}");
    // At the cap is fine.
    std::fs::write(&p, b"[1, 2]").unwrap();
    assert_eq!(file::read(&p, 6).unwrap(), b"[1, 2]");
    assert!(file::read(&p, 5).is_err());
    std::fs::write(&p, b"\xef\xbb\xbf[1]").unwrap();
    assert_eq!(file::read_text(&p, 6).unwrap(), "[1]");
}

#[test]
fn directories_and_outputs_are_checked_by_what_they_are() {
    let d = tempfile::tempdir().unwrap();
    let pipe = fifo(d.path());
    let f = d.path().join("f.txt");
    std::fs::write(&f, "x").unwrap();
    file::dir(d.path()).unwrap();
    for (p, what) in [(&pipe, "a named pipe"), (&f, "a regular file")] {
        let e = file::dir(p).unwrap_err().to_string();
        assert_eq!(e, format!("{}: is {what}, not a directory", p.display()));
    }
    // Outputs: an existing file is left as it was, a new one is not left behind, a
    // directory or a missing parent is refused.
    file::output(&f).unwrap();
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "x");
    let new = d.path().join("new.png");
    file::output(&new).unwrap();
    assert!(!new.exists());
    let e = file::output(d.path()).unwrap_err().to_string();
    assert!(e.ends_with("is a directory, not a file to write"), "{e}");
    let e = file::output(&d.path().join("no/x.png")).unwrap_err().to_string();
    assert!(e.contains("no/x.png: cannot be written: "), "{e}");
    file::output(Path::new("/dev/null")).unwrap();
    let e = file::output_dir(&f).unwrap_err().to_string();
    assert!(
        e.ends_with("f.txt: is a regular file, not a directory to write into"),
        "{e}"
    );
    let sub = d.path().join("a/b");
    file::output_dir(&sub).unwrap();
    assert!(sub.is_dir());
}
