"""A fourth real-text retrieval set with graded relevance, from the documentation of this
machine's Perl modules (not a test): built after auto's rules were fixed (as of commit
e699b00), as a second check on text none of them was chosen on.

Passages: the POD of every module of Perl's own library and of the vendor directories
(`@INC` as Debian's perl has it: /usr/share/perl/5.*, /usr/lib/x86_64-linux-gnu/perl/5.*,
/usr/share/perl5, /usr/lib/x86_64-linux-gnu/perl5/5.*), rendered by `pod2text` and split as
benches/corpus.py splits text, at most --per-module passages a module (150: enough for 5,000 passages; the lists of
perldiag and Config are cut there), each labelled with
its module name (`File::Temp`; a module found twice counts once, the first directory
above winning). Queries: the hand-written QUERIES below, each with the modules that answer
it (grade 2) and the modules close to it (grade 1); every other passage is grade 0.
Embedded by the crate's own MiniLM (`ctxprune embed`). Cached under --cache. Nothing is
downloaded (Debian's `perl` package provides the modules).

    python benches/perltext.py --ctxprune target/release/ctxprune --set target/perltext.safetensors
    ctxprune eval --set target/perltext.safetensors --noise 0.05,0.15,0.3 --no-peaks
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import labelled  # noqa: E402
from realtext import set_builder_main  # noqa: E402

ROOTS = ("/usr/share/perl/5.*", "/usr/lib/x86_64-linux-gnu/perl/5.*", "/usr/share/perl5",
         "/usr/lib/x86_64-linux-gnu/perl5/5.*")

# (query, grade-2 modules, grade-1 modules), written by hand before the set was built.
QUERIES = [
    ("Parse command-line options with long names and default values",
     "Getopt::Long", "Getopt::Std Pod::Usage"),
    ("Encode Perl data structures as JSON text and decode them back",
     "JSON::PP JSON", "JSON::PP::Boolean Data::Dumper Storable"),
    ("Run an external command and read what it prints on standard output and standard error",
     "IPC::Open3 IPC::Cmd", "IPC::Open2 IO::Pipe"),
    ("Create a temporary file that is removed automatically",
     "File::Temp", "File::Spec File::Path"),
    ("Walk a directory tree and visit every file below it",
     "File::Find", "File::Glob File::Spec DirHandle IO::Dir File::Basename"),
    ("Copy and move files on disk",
     "File::Copy", "File::Path File::Compare File::Temp"),
    ("Split a file path into its directory, base name and suffix",
     "File::Basename File::Spec File::Spec::Unix", "File::Spec::Functions Cwd"),
    ("Compute the MD5 or SHA digest of a file",
     "Digest::MD5 Digest::SHA Digest::file", "Digest Digest::base"),
    ("Compress data with gzip and read gzip-compressed files",
     "IO::Compress::Gzip IO::Uncompress::Gunzip Compress::Zlib",
     "Compress::Raw::Zlib IO::Zlib IO::Compress::Deflate IO::Uncompress::AnyUncompress"),
    ("Read and write zip archives",
     "IO::Compress::Zip IO::Uncompress::Unzip", "Archive::Tar IO::Compress::Base"),
    ("Create and extract tar archives",
     "Archive::Tar Archive::Tar::File", "IO::Compress::Gzip IO::Zlib CPAN::Tarzip"),
    ("Arbitrary-precision arithmetic on big integers and decimal numbers",
     "Math::BigInt Math::BigFloat bigint bignum", "Math::BigRat bigrat bigfloat Math::BigInt::Calc"),
    ("Complex numbers and trigonometric functions",
     "Math::Complex Math::Trig", "POSIX"),
    ("Write unit tests that compare values and report the failures",
     "Test::More Test::Simple", "Test::Builder Test2::API Test::Harness Test::Tutorial"),
    ("Run a suite of test scripts and summarize their TAP results",
     "Test::Harness TAP::Harness App::Prove", "TAP::Parser TAP::Formatter::Console App::Prove::State"),
    ("Make an HTTP GET request and download a web page",
     "HTTP::Tiny", "File::Fetch Net::FTP IO::Socket::IP"),
    ("Send an email through an SMTP server",
     "Net::SMTP", "Net::Cmd Net::Config Net::POP3"),
    ("Open a TCP connection to a server and exchange lines with it",
     "IO::Socket::INET IO::Socket::IP Socket", "IO::Socket IO::Select Net::hostent"),
    ("Wait for input on several file handles at once",
     "IO::Select IO::Poll", "IO::Handle Socket"),
    ("Print a nested data structure in readable form for debugging",
     "Data::Dumper Dumpvalue", "Devel::Peek Storable"),
    ("Save data structures to disk and load them back in binary form",
     "Storable", "Data::Dumper SDBM_File DB_File Memoize::Storable"),
    ("Cache the results of a slow function so repeated calls return at once",
     "Memoize Memoize::Expire", "Tie::Memoize Memoize::Storable"),
    ("Convert dates and times to and from seconds since the epoch",
     "Time::Local Time::Piece", "Time::Seconds POSIX Time::localtime Time::gmtime"),
    ("Measure elapsed time with high resolution and sleep for fractions of a second",
     "Time::HiRes Benchmark", "Time::Piece"),
    ("Run code in several threads and share variables between them",
     "threads threads::shared Thread::Queue", "Thread::Semaphore Thread"),
    ("Convert text between character encodings such as UTF-8 and Latin-1",
     "Encode Encode::Unicode Encode::Byte", "utf8 PerlIO::encoding encoding Encode::Supported open"),
    ("Sort Unicode strings by the collation rules of a language",
     "Unicode::Collate Unicode::Collate::Locale", "Unicode::Normalize sort locale"),
    ("Wrap long lines of text to a given width",
     "Text::Wrap", "Text::Tabs Text::Abbrev"),
    ("Colour the text printed to a terminal",
     "Term::ANSIColor", "Term::Cap Pod::Text::Color"),
    ("Find the minimum, maximum, sum and unique elements of a list",
     "List::Util", "Scalar::Util Sub::Util"),
    ("Convert POD documentation into manual pages or HTML",
     "Pod::Man Pod::Html Pod::Simple::HTML Pod::Simple::XHTML",
     "Pod::Text Pod::Usage Pod::Checker Pod::Simple"),
    ("Write a Makefile.PL to build and install a Perl module",
     "ExtUtils::MakeMaker ExtUtils::MakeMaker::Tutorial",
     "ExtUtils::Install ExtUtils::MakeMaker::FAQ ExtUtils::Manifest"),
    ("Raise exceptions automatically when built-in functions fail",
     "autodie Fatal", "autodie::exception Carp"),
    ("Report errors from the caller's point of view with a stack trace",
     "Carp", "diagnostics warnings"),
    ("Encode binary data as Base64 text",
     "MIME::Base64", "MIME::QuotedPrint Encode::MIME::Header"),
    ("Send messages to the system log",
     "Sys::Syslog", "Sys::Hostname"),
    ("Tie a hash to a database file on disk",
     "DB_File SDBM_File GDBM_File AnyDBM_File", "NDBM_File ODBM_File DBM_Filter Tie::Hash"),
    ("Access the lines of a file as an array",
     "Tie::File", "Tie::Array"),
    ("Look up user accounts and group entries",
     "User::pwent User::grent", "POSIX"),
    ("Load a module at run time only when it is installed",
     "Module::Load Module::Load::Conditional", "Module::Loaded if autouse Module::CoreList"),
]


def modules() -> list[tuple[str, Path]]:
    """(module name, file) of every .pm and .pod with POD under ROOTS, each name once."""
    seen, out = set(), []
    for pattern in ROOTS:
        for root in sorted(glob.glob(pattern)):
            if Path(root).is_symlink():
                continue
            for f in sorted(Path(root).rglob("*")):
                if f.suffix not in (".pm", ".pod") or not f.is_file():
                    continue
                name = str(f.relative_to(root).with_suffix("")).replace("/", "::")
                if name in seen:
                    continue
                with open(f, "rb") as fh:
                    if b"\n=head1" not in fh.read():
                        continue
                seen.add(name)
                out.append((name, f))
    return out


def render(f: Path) -> str:
    r = subprocess.run(["pod2text", "-w", "100", str(f)], capture_output=True, timeout=60,
                       env=dict(os.environ, LC_ALL="C.UTF-8"))
    return "\n".join(line.strip() for line in r.stdout.decode("utf-8", "replace").splitlines())


def collect(per_module: int) -> list[dict]:
    mods = modules()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        texts = list(ex.map(render, [f for _, f in mods]))
    return labelled(((name, text) for (name, _), text in zip(mods, texts)), "module", per_module)[0]


def main():
    set_builder_main(collect, QUERIES, "module", "modules", "target/perltext", "--per-module", 150,
                     "modules this machine lacks")


if __name__ == "__main__":
    main()
