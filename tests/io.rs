//! Loaders: every format, and the errors that name the file, row and problem.

use ctxprune::io::{load_costs, load_embeddings, load_query, write_npy_f32};
use std::path::{Path, PathBuf};

pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A raw .npy with the given descr, order and shape.
pub fn npy_bytes(descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
        ),
    };
    let h = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape_s}, }}",
        if fortran { "True" } else { "False" }
    );
    npy_bytes_with_header(&h, data)
}

/// A raw .npy with `header` as its header text (padded as numpy pads it) and `data`.
pub fn npy_bytes_with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string();
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn npy_f32_f64_and_fortran() {
    let d = tmp();
    let p = d.path().join("e.npy");
    write_npy_f32(&p, 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let l = load_embeddings(p.to_str().unwrap()).unwrap();
    assert_eq!((l.embeddings.rows(), l.embeddings.dim()), (2, 3));
    assert_eq!(l.embeddings.row(1), &[4.0, 5.0, 6.0]);
    let f64s: Vec<u8> = [1.0f64, -2.5].iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = write(d.path(), "d.npy", &npy_bytes("<f8", false, &[1, 2], &f64s));
    assert_eq!(
        load_embeddings(p.to_str().unwrap()).unwrap().embeddings.row(0),
        &[1.0, -2.5]
    );
    let p = write(d.path(), "f.npy", &npy_bytes("<f8", true, &[1, 2], &f64s));
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("Fortran order") && e.contains("f.npy"), "{e}");
    let p = write(d.path(), "r.npy", &npy_bytes("<f8", false, &[2], &f64s));
    assert!(load_embeddings(p.to_str().unwrap())
        .unwrap_err()
        .to_string()
        .contains("2-D"));
    let nan: Vec<u8> = [1.0f32, 2.0, f32::NAN, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let p = write(d.path(), "nan.npy", &npy_bytes("<f4", false, &[2, 2], &nan));
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("nan.npy") && e.contains("row 1, column 0"), "{e}");
    let p = write(d.path(), "empty.npy", b"");
    assert!(load_embeddings(p.to_str().unwrap())
        .unwrap_err()
        .to_string()
        .contains("empty"));
    let p = write(
        d.path(),
        "huge.npy",
        &npy_bytes("<f4", false, &[1 << 40, 1 << 20], &nan),
    );
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("more data than the file"), "{e}");
    let p = write(d.path(), "junk.npy", b"not an npy file at all");
    assert!(load_embeddings(p.to_str().unwrap())
        .unwrap_err()
        .to_string()
        .contains("junk.npy"));
    // Queries: (d,) and (1, d); costs as integers.
    let q: Vec<u8> = [0.5f32, 0.5].iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = write(d.path(), "q.npy", &npy_bytes("<f4", false, &[2], &q));
    assert_eq!(load_query(&p).unwrap(), vec![0.5, 0.5]);
    let p = write(d.path(), "q0.npy", &npy_bytes("<f4", false, &[2], &[0u8; 8]));
    assert!(load_query(&p).unwrap_err().to_string().contains("zero norm"));
    let c: Vec<u8> = [3i64, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = write(d.path(), "c.npy", &npy_bytes("<i8", false, &[2], &c));
    assert_eq!(load_costs(&p).unwrap(), vec![3.0, 7.0]);
}

#[test]
fn safetensors_named_and_single() {
    use safetensors::{serialize, tensor::TensorView, Dtype};
    let d = tmp();
    let a: Vec<u8> = [1.0f32, 0.0, 0.0, 1.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b: Vec<u8> = [half::bf16::from_f32(2.0), half::bf16::from_f32(-1.0)]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let ta = TensorView::new(Dtype::F32, vec![2, 2], &a).unwrap();
    let tb = TensorView::new(Dtype::BF16, vec![1, 2], &b).unwrap();
    let bytes = serialize(vec![("emb", ta.clone()), ("other", tb)], None).unwrap();
    let p = write(d.path(), "m.safetensors", &bytes);
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("emb, other") && e.contains("FILE.safetensors:NAME"),
        "{e}"
    );
    let l = load_embeddings(&format!("{}:other", p.display())).unwrap();
    assert_eq!(l.embeddings.row(0), &[2.0, -1.0]);
    let l = load_embeddings(&format!("{}:emb", p.display())).unwrap();
    assert_eq!(l.embeddings.rows(), 2);
    assert!(load_embeddings(&format!("{}:nope", p.display()))
        .unwrap_err()
        .to_string()
        .contains("nope"));
    let single = serialize(vec![("x", ta)], None).unwrap();
    let p = write(d.path(), "s.safetensors", &single);
    assert_eq!(load_embeddings(p.to_str().unwrap()).unwrap().embeddings.dim(), 2);
}

#[test]
fn jsonl_rows_tokens_texts_and_errors() {
    let d = tmp();
    let p = write(
        d.path(),
        "e.jsonl",
        b"{\"embedding\": [1, 0], \"tokens\": 12, \"text\": \"a b\"}\n\n{\"embedding\": [0.5, 0.5], \"tokens\": 3, \"text\": \"c\"}\n",
    );
    let l = load_embeddings(p.to_str().unwrap()).unwrap();
    assert_eq!(l.embeddings.rows(), 2);
    assert_eq!(l.tokens, Some(vec![12.0, 3.0]));
    assert_eq!(l.texts, Some(vec!["a b".to_string(), "c".to_string()]));
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "ragged.jsonl",
            b"{\"embedding\": [1, 0]}\n{\"embedding\": [1]}\n",
            "line 2",
        ),
        (
            "nan.jsonl",
            b"{\"embedding\": [1, NaN]}\n",
            "line 1: invalid JSON",
        ),
        (
            "str.jsonl",
            b"{\"embedding\": [1, \"x\"]}\n",
            "embedding[1] is a string, not a number",
        ),
        ("noemb.jsonl", b"{\"text\": \"hi\"}\n", "missing \"embedding\""),
        ("blank.jsonl", b"\n\n", "no rows"),
    ];
    for (name, body, want) in cases {
        let p = write(d.path(), name, body);
        let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains(want), "{name}: {e}");
    }
    let p = write(d.path(), "e.txt", b"1 2 3");
    assert!(load_embeddings(p.to_str().unwrap())
        .unwrap_err()
        .to_string()
        .contains("unknown embeddings format"));
    assert!(load_embeddings("/nonexistent/x.npy")
        .unwrap_err()
        .to_string()
        .contains("/nonexistent/x.npy"));
}

#[test]
fn loader_edge_cases_are_errors_not_silent_changes() {
    let d = tmp();
    let f4: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    // Trailing bytes after the data.
    let mut extra = npy_bytes("<f4", false, &[1, 2], &f4);
    extra.extend_from_slice(&[0, 0, 0, 0]);
    let p = write(d.path(), "extra.npy", &extra);
    assert!(load_embeddings(p.to_str().unwrap())
        .unwrap_err()
        .to_string()
        .contains("4 bytes after the data"));
    // A shape whose byte count overflows u64, and one that wraps usize.
    for (name, shape) in [
        ("ovf.npy", [1usize << 40, 1 << 40]),
        ("wrap.npy", [1 << 32, 1 << 32]),
    ] {
        let p = write(d.path(), name, &npy_bytes("<f4", false, &shape, &f4));
        let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("more data than the file"), "{name}: {e}");
    }
    // Datetimes are not numbers.
    let p = write(
        d.path(),
        "dt.npy",
        &npy_bytes("<M8[s]", false, &[1, 1], &[0u8; 8]),
    );
    assert!(load_embeddings(p.to_str().unwrap())
        .unwrap_err()
        .to_string()
        .contains("unsupported dtype"));
    // JSON lines: tokens on some rows only, a value that underflows f32.
    let p = write(
        d.path(),
        "mixed.jsonl",
        b"{\"embedding\": [1, 0], \"tokens\": 3}\n{\"embedding\": [0, 1]}\n",
    );
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("line 1 has \"tokens\" but line 2 does not"), "{e}");
    let p = write(d.path(), "tiny.jsonl", b"{\"embedding\": [1, 1e-50]}\n");
    assert!(load_embeddings(p.to_str().unwrap())
        .unwrap_err()
        .to_string()
        .contains("underflows"));
    let p = write(
        d.path(),
        "texts.jsonl",
        b"{\"text\": \"a\", \"tokens\": 2}\n{\"text\": \"b\"}\n",
    );
    assert!(ctxprune::io::load_texts(&p)
        .unwrap_err()
        .to_string()
        .contains("line 2 does not"));
    // Safetensors tensor names may contain ':'.
    use safetensors::{serialize, tensor::TensorView, Dtype};
    let t = TensorView::new(Dtype::F32, vec![1, 2], &f4).unwrap();
    let p = write(
        d.path(),
        "n.safetensors",
        &serialize(vec![("enc:emb", t)], None).unwrap(),
    );
    assert_eq!(
        load_embeddings(&format!("{}:enc:emb", p.display()))
            .unwrap()
            .embeddings
            .row(0),
        &[1.0, 2.0]
    );
}

/// Files that are not regular files are refused by what they are, before a byte is read
/// (a link to /dev/urandom used to read forever).
#[test]
fn special_files_are_refused_without_reading() {
    let d = tmp();
    let link = d.path().join("x.jsonl");
    std::os::unix::fs::symlink("/dev/urandom", &link).unwrap();
    let e = load_embeddings(link.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("x.jsonl: is a character device, not a regular file"),
        "{e}"
    );
    let npy = d.path().join("u.npy");
    std::os::unix::fs::symlink("/dev/zero", &npy).unwrap();
    let e = load_embeddings(npy.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("is a character device"), "{e}");
    let dir = d.path().join("dir.npy");
    std::fs::create_dir(&dir).unwrap();
    let e = load_embeddings(dir.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("dir.npy: is a directory, not a regular file"), "{e}");
    let fifo = d.path().join("p.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let e = load_costs(&fifo).unwrap_err().to_string();
        assert!(e.contains("is a named pipe"), "{e}");
    }
    let e = load_embeddings(d.path().join("noext").to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("has no extension"), "{e}");
}

/// Numbers that do not fit are named where they are; integer embeddings are refused;
/// empty pools and zero rows name their file and line.
#[test]
fn numbers_that_do_not_fit_and_empty_pools_name_where() {
    let d = tmp();
    let f8: Vec<u8> = [1.0f64, 1e39, 0.5, 0.5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let p = write(d.path(), "big.npy", &npy_bytes("<f8", false, &[2, 2], &f8));
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("big.npy: row 0, column 1: 1e39 does not fit in f32"),
        "{e}"
    );
    let tiny: Vec<u8> = [1.0f64, 0.0, 1e-50, 1.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let p = write(d.path(), "tiny.npy", &npy_bytes("<f8", false, &[2, 2], &tiny));
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("row 1, column 0: 1e-50 underflows f32 to 0"), "{e}");
    let ints: Vec<u8> = [1i32, 2, 3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = write(d.path(), "int.npy", &npy_bytes("<i4", false, &[2, 2], &ints));
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("int.npy: dtype '<i4' is an integer type"), "{e}");
    let p = write(d.path(), "none.npy", &npy_bytes("<f4", false, &[0, 4], &[]));
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("none.npy: no rows (shape [0, 4])"), "{e}");
    let p = write(d.path(), "q.json", b"[1.0, 1e39]");
    let e = load_query(&p).unwrap_err().to_string();
    assert!(e.contains("q.json: element 1: 1e39 does not fit in f32"), "{e}");
    let p = write(d.path(), "c.json", b"[3, 0, 2]");
    let e = load_costs(&p).unwrap_err().to_string();
    assert!(
        e.contains("c.json: element 1: a token cost must be a positive number, got 0"),
        "{e}"
    );
    let p = write(
        d.path(),
        "z.jsonl",
        b"{\"embedding\": [1, 0]}\n\n{\"embedding\": [0, 0]}\n",
    );
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("z.jsonl: line 3: embedding is all zeros"), "{e}");
    let p = write(d.path(), "t.jsonl", b"{\"embedding\": [1, 0], \"tokens\": 0}\n");
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("t.jsonl: line 1: \"tokens\" must be a positive number, got 0"),
        "{e}"
    );
    let p = write(d.path(), "k.jsonl", b"{\"embedding\": {\"a\": 1}}\n");
    let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("\"embedding\" is an object, not an array"), "{e}");
}

/// A UTF-8 byte order mark is skipped; every loader error is one line, even for headers
/// whose parser reports several.
#[test]
fn bom_is_skipped_and_errors_are_one_line() {
    let d = tmp();
    let p = write(
        d.path(),
        "bom.jsonl",
        b"\xef\xbb\xbf{\"embedding\": [1, 0], \"text\": \"a\"}\n",
    );
    assert_eq!(load_embeddings(p.to_str().unwrap()).unwrap().embeddings.rows(), 1);
    let p = write(d.path(), "bom.json", b"\xef\xbb\xbf[2, 3]");
    assert_eq!(load_costs(&p).unwrap(), vec![2.0, 3.0]);
    // Headers that do not parse, newlines in shapes and descrs.
    let bad: Vec<Vec<u8>> = [
        "{'descr': '<f4\n', 'fortran_order': False, 'shape': (1, 2), }",
        "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1, 2), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, x\ny), }",
        "not a dict at all\n\n",
    ]
    .iter()
    .map(|h| npy_bytes_with_header(h, &[0u8; 8]))
    .collect();
    // A line break inside the dict is whitespace to Python's literal syntax, as numpy
    // reads headers: accepted.
    let p = write(
        d.path(),
        "nl.npy",
        &npy_bytes_with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,\n 2), }",
            &[0u8; 8],
        ),
    );
    assert_eq!(load_embeddings(p.to_str().unwrap()).unwrap().embeddings.dim(), 2);
    for (i, b) in bad.iter().enumerate() {
        let p = write(d.path(), &format!("h{i}.npy"), b);
        let e = load_embeddings(p.to_str().unwrap()).unwrap_err().to_string();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(&format!("h{i}.npy")), "{e}");
    }
}

/// The in-memory parsers run the file loaders' checks and give the same results.
#[test]
fn parsers_over_bytes_agree_with_the_loaders() {
    use ctxprune::io::{parse_embeddings, parse_npy_f32, EmbeddingsFormat};
    let d = tmp();
    let p = d.path().join("e.npy");
    write_npy_f32(&p, 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    let a = load_embeddings(p.to_str().unwrap()).unwrap();
    let b = parse_embeddings(&p, EmbeddingsFormat::Npy, &bytes, None).unwrap();
    assert_eq!(a.embeddings.as_slice(), b.embeddings.as_slice());
    assert_eq!(parse_npy_f32(&p, &bytes).unwrap().0, vec![2, 3]);
    // A truncated copy, at every length, is an error and never a panic.
    for cut in 0..bytes.len() {
        assert!(parse_embeddings(&p, EmbeddingsFormat::Npy, &bytes[..cut], None).is_err());
    }
    let e = parse_embeddings(&p, EmbeddingsFormat::Npy, &bytes, Some("t")).unwrap_err();
    assert!(e.to_string().contains("applies to .safetensors"), "{e}");
}
