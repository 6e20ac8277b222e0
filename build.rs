//! Build steps, none of which needs a CUDA toolkit:
//! 1. embeds the CUDA C sources of kernels/ into the crate (a manifest of names, sources and
//!    one content hash), so a release binary carries its kernels and NVRTC compiles them
//!    at run time;
//! 2. reads kernels/kernels.tbl (every kernel's `extern "C"` signature) and writes the
//!    table the raw layer expands into one typed launch function per kernel;
//! 3. with the `cuda-emu` feature (tests and CI only), compiles kernels/*.cu as C++ with the
//!    emulator's header and runtime (kernels/emu/) and one trampoline per kernel that
//!    checks, at compile time, that the kernel's signature is the table's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    let dir = Path::new("kernels");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into()));
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("cu" | "cuh")))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    embed(&files, &out_dir);
    let table = match Table::read(&dir.join("kernels.tbl")) {
        Ok(t) => t,
        Err(e) => fail(&format!("kernels/kernels.tbl: {e}")),
    };
    write_out(&out_dir.join("kernel_table.rs"), &table.rust());
    write_out(&out_dir.join("kernel_params.rs"), &table.ptx_params());
    #[cfg(feature = "cuda-emu")]
    emulator(&files, &table, &out_dir);
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}

fn write_out(dst: &Path, text: &str) {
    if let Err(e) = std::fs::write(dst, text) {
        fail(&format!("cannot write {}: {e}", dst.display()));
    }
}

/// The embedded sources and their FNV-1a hash (the compiled-module cache key).
fn embed(files: &[PathBuf], out_dir: &Path) {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = String::from("/// Kernel sources embedded at build time: (file name, CUDA C source).\n");
    out.push_str("pub const SOURCES: &[(&str, &str)] = &[\n");
    for f in files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for b in name.bytes().chain(text.bytes()) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        // Relative to the manifest, resolved when the crate compiles: an absolute path
        // here would go stale when the checkout moves (or another checkout shares the
        // target directory) while the kernels, unchanged, do not rerun this script.
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_default();
        let rel = f.strip_prefix(&manifest).unwrap_or(f);
        let rel = rel.to_string_lossy().replace('\\', "/");
        let _ = writeln!(
            out,
            "    ({name:?}, include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/\", {rel:?}))),"
        );
    }
    out.push_str("];\n");
    let _ = writeln!(
        out,
        "/// FNV-1a hash of every kernel file's name and contents.\npub const SOURCES_HASH: u64 = {hash:#x};"
    );
    write_out(&out_dir.join("kernels.rs"), &out);
}

/// One argument of a kernel.
struct Arg {
    name: String,
    /// "in", "out", "opt" or "" (by value).
    kind: String,
    ty: String,
}

struct Kernel {
    name: String,
    args: Vec<Arg>,
    doc: String,
}

struct Table {
    kernels: Vec<Kernel>,
}

const TYPES: [(&str, &str); 8] = [
    ("f32", "float"),
    ("f64", "double"),
    ("u8", "unsigned char"),
    ("u16", "unsigned short"),
    ("i32", "int"),
    ("i64", "long long"),
    ("u32", "unsigned int"),
    ("u64", "unsigned long long"),
];

#[cfg(feature = "cuda-emu")]
fn c_type(ty: &str) -> &'static str {
    TYPES.iter().find(|t| t.0 == ty).map_or("void", |t| t.1)
}

impl Table {
    fn read(path: &Path) -> Result<Table, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        let mut kernels = Vec::new();
        for (ln, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |m: &str| format!("line {}: {m}", ln + 1);
            let (sig, doc) = line.split_once("--").unwrap_or((line, ""));
            let (name, rest) = sig.split_once('(').ok_or_else(|| at("expected name(args)"))?;
            let rest = rest
                .trim()
                .strip_suffix(')')
                .ok_or_else(|| at("expected a closing parenthesis"))?;
            let mut args = Vec::new();
            for a in rest.split(',').map(str::trim).filter(|a| !a.is_empty()) {
                let (an, spec) = a
                    .split_once(':')
                    .ok_or_else(|| at(&format!("argument '{a}' has no type")))?;
                let words: Vec<&str> = spec.split_whitespace().collect();
                let (kind, ty) = match words.as_slice() {
                    [ty] => ("", *ty),
                    [k @ ("in" | "out" | "opt"), ty] => (*k, *ty),
                    _ => return Err(at(&format!("argument '{a}': expected [in|out|opt] TYPE"))),
                };
                if !TYPES.iter().any(|t| t.0 == ty) {
                    return Err(at(&format!("argument '{a}': unknown type '{ty}'")));
                }
                args.push(Arg {
                    name: an.trim().to_string(),
                    kind: kind.to_string(),
                    ty: ty.to_string(),
                });
            }
            kernels.push(Kernel {
                name: name.trim().to_string(),
                args,
                doc: doc.trim().to_string(),
            });
        }
        Ok(Table { kernels })
    }

    /// The `kernels!` invocation: `fn name / emu_name (arg: RustType => FfiType, ...);`.
    fn rust(&self) -> String {
        let mut out = String::from("kernels! {\n");
        for k in &self.kernels {
            let _ = writeln!(out, "    /// {}", if k.doc.is_empty() { &k.name } else { &k.doc });
            let args: Vec<String> = k
                .args
                .iter()
                .map(|a| match a.kind.as_str() {
                    "in" => format!("{}: View<'_, {}> => *const {}", a.name, a.ty, a.ty),
                    "out" => format!("{}: ViewMut<'_, {}> => *mut {}", a.name, a.ty, a.ty),
                    "opt" => format!("{}: NullPtr<'_, {}> => *const {}", a.name, a.ty, a.ty),
                    _ => format!("{}: {} => {}", a.name, a.ty, a.ty),
                })
                .collect();
            let _ = writeln!(
                out,
                "    fn {} / ctx_emu_{} ({});",
                k.name,
                k.name,
                args.join(", ")
            );
        }
        out.push_str("}\n");
        out
    }
}

impl Table {
    /// Every kernel's parameters as PTX declares them (`.u64` for pointers and 64-bit
    /// integers, `.u32` for 32-bit ones, `.f32`, `.f64`): what `ctxprune kernels` checks
    /// the compiled PTX against.
    fn ptx_params(&self) -> String {
        let mut out = String::from(
            "/// Every kernel of kernels/kernels.tbl with its parameters' PTX types, in order.\npub const KERNEL_PARAMS: &[(&str, &[&str])] = &[\n",
        );
        for k in &self.kernels {
            let p: Vec<String> = k
                .args
                .iter()
                .map(|a| {
                    let t = if a.kind.is_empty() {
                        match a.ty.as_str() {
                            "f32" => ".f32",
                            "f64" => ".f64",
                            "i64" | "u64" => ".u64",
                            "u8" => ".u8",
                            "u16" => ".u16",
                            _ => ".u32",
                        }
                    } else {
                        ".u64"
                    };
                    format!("{t:?}")
                })
                .collect();
            let _ = writeln!(out, "    ({:?}, &[{}]),", k.name, p.join(", "));
        }
        out.push_str("];\n");
        out
    }
}

/// The `extern "C" __global__` kernels a .cu file defines.
#[cfg(feature = "cuda-emu")]
fn kernels_in(src: &str) -> Vec<String> {
    src.match_indices("extern \"C\" __global__ void ")
        .filter_map(|(i, m)| {
            let rest = &src[i + m.len()..];
            rest.split('(').next().map(|n| n.trim().to_string())
        })
        .collect()
}

/// Compiles the kernels as C++ against the emulator (feature `cuda-emu`).
#[cfg(feature = "cuda-emu")]
fn emulator(files: &[PathBuf], table: &Table, out_dir: &Path) {
    let emu_dir = Path::new("kernels/emu");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .flag("-ffp-contract=off")
        .flag("-pthread")
        .define("CTX_EMU", "1")
        .include(emu_dir)
        .include("kernels")
        .warnings(false);
    println!("cargo:rerun-if-env-changed=CTXPRUNE_EMU_TSAN");
    if std::env::var_os("CTXPRUNE_EMU_TSAN").is_some_and(|v| v == "1") {
        // The race check: kernels and runtime instrumented by ThreadSanitizer.
        build.flag("-fsanitize=thread").opt_level(1).debug(true);
        println!("cargo:rustc-link-lib=dylib=tsan");
    } else {
        build.opt_level(2);
    }
    let mut seen = Vec::new();
    for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "cu")) {
        let src = std::fs::read_to_string(f).unwrap_or_default();
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("kernels");
        let abs = std::fs::canonicalize(f).unwrap_or_else(|_| f.clone());
        let mut tu = format!(
            "// Generated by build.rs: {} compiled for the CUDA emulator, with one trampoline per kernel.\n#include \"emu.h\"\n#include <type_traits>\n#include \"{}\"\n",
            f.display(),
            abs.display()
        );
        for name in kernels_in(&src) {
            let Some(k) = table.kernels.iter().find(|k| k.name == name) else {
                fail(&format!(
                    "{}: kernel {name} is not in kernels/kernels.tbl: add its signature there",
                    f.display()
                ));
            };
            seen.push(name.clone());
            let params: Vec<String> = k
                .args
                .iter()
                .map(|a| {
                    let t = c_type(&a.ty);
                    match a.kind.as_str() {
                        "in" | "opt" => format!("const {t}* {}", a.name),
                        "out" => format!("{t}* {}", a.name),
                        _ => format!("{t} {}", a.name),
                    }
                })
                .collect();
            let types: Vec<String> = params
                .iter()
                .map(|p| p.rsplit_once(' ').map_or(p.clone(), |(t, _)| t.to_string()))
                .collect();
            let names: Vec<&str> = k.args.iter().map(|a| a.name.as_str()).collect();
            let _ = write!(
                tu,
                "extern \"C\" int ctx_emu_{name}(const ctx_emu_grid* ctx_g{comma}{params}) {{\n    static_assert(std::is_same<decltype(&{name}), void (*)({types})>::value,\n                  \"{name}: its signature in {file} differs from kernels/kernels.tbl\");\n    auto body = [&]() {{ {name}({names}); }};\n    return ctx_emu_run(ctx_g, &ctx_emu_invoke<decltype(body)>, &body);\n}}\n",
                comma = if params.is_empty() { "" } else { ", " },
                params = params.join(", "),
                types = types.join(", "),
                names = names.join(", "),
                file = f.display(),
            );
        }
        let dst = out_dir.join(format!("emu_{stem}.cpp"));
        write_out(&dst, &tu);
        build.file(dst);
    }
    if let Some(k) = table.kernels.iter().find(|k| !seen.contains(&k.name)) {
        fail(&format!(
            "kernels/kernels.tbl lists {}, which no kernels/*.cu defines",
            k.name
        ));
    }
    println!("cargo:rerun-if-changed=kernels/emu/emu.h");
    println!("cargo:rerun-if-changed=kernels/emu/runtime.cpp");
    build.file(emu_dir.join("runtime.cpp"));
    build.compile("ctxprune_cuda_emu");
}
