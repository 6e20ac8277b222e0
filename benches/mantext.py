"""A second real-text retrieval set with graded relevance, from this machine's manual pages
(not a test): a check, on text the rerank methods were not tuned on, of what
benches/realtext.py's set showed.

Passages: the manual pages of sections 1, 5, 7 and 8 under /usr/share/man (the gcloud
reference pages left out: 16,000 generated pages of one tool), rendered by `man` and
split as benches/corpus.py splits text, at most --per-page passages a page, each
labelled with its page (`tar.1`; a page linked under several names counts once, under
the name its file has). Queries: the hand-written QUERIES below, each with the pages that
answer it (grade 2) and the pages close to it (grade 1); every other passage is grade 0.
Embedded by the crate's own MiniLM (`ctxprune embed`). Cached under --cache. Nothing is
downloaded (`apt-get install man-db manpages` provides the pages where they are missing).

    python benches/mantext.py --ctxprune target/release/ctxprune --set target/mantext.safetensors
    ctxprune eval --set target/mantext.safetensors --noise 0.05,0.15,0.3 --no-peaks
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import labelled  # noqa: E402
from realtext import set_builder_main  # noqa: E402

MAN = Path("/usr/share/man")
SECTIONS = ("man1", "man5", "man7", "man8")

# (query, grade-2 pages, grade-1 pages), written by hand.
QUERIES = [
    ("Create a compressed archive of a directory and extract it again",
     "tar.1", "gzip.1 bzip2.1 xz.1 zip.1 unzip.1"),
    ("Search files for lines that match a regular expression",
     "grep.1", "regex.7 sed.1 awk.1"),
    ("Edit a text stream by substituting patterns on each line",
     "sed.1", "awk.1 tr.1 regex.7"),
    ("Find files by name or modification time below a directory and run a command on each",
     "find.1 xargs.1", "stat.1 ls.1"),
    ("Copy files securely to a remote machine",
     "scp.1 sftp.1", "ssh.1 ssh_config.5"),
    ("Log in to a remote host with public key authentication",
     "ssh.1 ssh-keygen.1 ssh-agent.1", "ssh_config.5 scp.1 sftp.1"),
    ("Download a file over HTTP from the command line",
     "curl.1 wget.1", "openssl.1ssl"),
    ("Start, stop and enable a system service at boot",
     "systemctl.1 systemd.service.5", "journalctl.1 hostnamectl.1 timedatectl.1"),
    ("Read and filter the logs of a system service",
     "journalctl.1 journald.conf.5", "systemctl.1 dmesg.1"),
    ("Change the permissions and the owner of files",
     "chmod.1 chown.1 chgrp.1", "stat.1 ls.1"),
    ("List running processes and their CPU and memory usage",
     "ps.1 top.1", "free.1 vmstat.8 uptime.1 kill.1"),
    ("Send a signal to terminate a process by its name",
     "kill.1 pkill.1 killall.1", "signal.7 ps.1"),
    ("Change the scheduling priority of a running program",
     "nice.1 renice.1", "ps.1 top.1"),
    ("Show network interfaces, their addresses and the routing table",
     "ip.8 ifconfig.8", "ss.8 netstat.8 ip.7"),
    ("List open TCP sockets and which processes listen on which ports",
     "ss.8 netstat.8", "lsof.8 tcp.7 socket.7 fuser.1"),
    ("Mount a filesystem and configure the mounts made at boot",
     "mount.8 umount.8 fstab.5", "lsblk.8 blkid.8 mkfs.8 df.1"),
    ("Check how much disk space is used and how much is free",
     "df.1 du.1", "lsblk.8 mount.8"),
    ("Copy raw blocks of a disk to make an image of the device",
     "dd.1", "lsblk.8 blkid.8"),
    ("Encrypt and sign files with public-key cryptography",
     "gpg.1", "openssl.1ssl"),
    ("Inspect the symbols and sections of an ELF binary",
     "objdump.1 nm.1 readelf.1", "ld.1 file.1"),
    ("Trace the system calls a program makes",
     "strace.1", "perf.1 valgrind.1 lsof.8"),
    ("Find memory leaks and invalid memory accesses in a C program",
     "valgrind.1", "strace.1 perf.1"),
    ("Sort the lines of a text file and remove duplicate lines",
     "sort.1 uniq.1", "comm.1 cut.1 join.1"),
    ("Compare two files line by line and apply the differences as a patch",
     "diff.1 patch.1", "cmp.1 comm.1"),
    ("Add a new user account and set its password",
     "useradd.8 passwd.1", "usermod.8 userdel.8 groupadd.8 passwd.5 shadow.5 group.5"),
    ("Install and remove Debian packages",
     "apt.8 apt-get.8 dpkg.1", "apt-cache.8 dpkg-query.1"),
    ("Set the system time zone and the clock",
     "timedatectl.1 tzselect.8", "date.1 hostnamectl.1 locale.1"),
    ("Compute checksums to verify downloaded files",
     "md5sum.1 sha256sum.1", "base64.1 cmp.1"),
    ("Display the bytes of a file in hexadecimal",
     "xxd.1 hexdump.1 od.1", "file.1 base64.1"),
    ("Keep terminal sessions running after disconnecting, with windows split into panes",
     "tmux.1", "nohup.1"),
]


def pages() -> list[Path]:
    """The pages of SECTIONS, each file once (links resolved), gcloud's left out."""
    seen, out = set(), []
    for sec in SECTIONS:
        for f in sorted((MAN / sec).glob("*")):
            if f.name.startswith("gcloud"):
                continue
            real = f.resolve()
            if real in seen or not real.is_file():
                continue
            seen.add(real)
            out.append(real)
    return out


def page_id(f: Path) -> str:
    """`/usr/share/man/man1/tar.1.gz` -> `tar.1`."""
    return re.sub(r"\.gz$", "", f.name)


def render(f: Path) -> str:
    env = dict(os.environ, MANWIDTH="100", MANPAGER="cat", PAGER="cat", LC_ALL="C.UTF-8")
    r = subprocess.run(["man", "-l", str(f)], capture_output=True, env=env, timeout=60)
    text = r.stdout.decode("utf-8", "replace")
    text = re.sub(r".\x08", "", text)  # overstrike (bold, underline)
    # Drop the header and footer lines; paragraphs are kept (blank-line separated).
    lines = text.splitlines()[1:-1]
    return "\n".join(line.strip() for line in lines)


def collect(per_page: int) -> list[dict]:
    files = pages()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        texts = list(ex.map(render, files))
    return labelled(((page_id(f), text) for f, text in zip(files, texts)), "page", per_page)[0]


def main():
    set_builder_main(collect, QUERIES, "page", "pages", "target/mantext", "--per-page", 12,
                     "pages this machine lacks")


if __name__ == "__main__":
    main()
