#!/usr/bin/python3
"""readme_blocks.py -- every command block of README.md and docs/fleet.md
works as written (run by tests/test_readme.sh; prints its ok/FAIL lines).

A command block is a fenced block tagged sh, shell, bash or console, or an
untagged or indented one whose first line is a command (`$ ` prompt, or a
first word that is a program: on PATH, a path, or sluiced/sluicectl).  Each
one is either

- RUN here, as written, from a scratch copy of the repository's top folder
  (examples/ copied, build/ a link to the build), in a private network,
  PID and mount namespace (`unshare -n -p -f -m --mount-proc`, with `-r`
  when not root): its fixed ports (6379, 6390, 8080, 8390, ...) are free
  there, nothing it starts outlives it (the namespace's first process is
  the shell running the block: when it exits the kernel kills the rest),
  and a deadline bounds it.  A block is cut into lines (a line ending in
  `\\` or `|` goes on); they are fed one after another to one /bin/sh,
  as a reader pastes them.  After a line that starts a server in the
  background (`&`), the shell waits until that server says it is ready
  (sluiced: `msg="ready"`, redis-server: `Ready to accept connections`),
  as a reader sees it before typing on.  What the block shows is checked
  (`# remaining 4, then 3`, `# 1 5 4 ...`, a transcript's integers, ...).
  What a block takes for granted is set up first, and said in the docs:
  a Redis on 6379, a sluiced on 6390 (./scripts/run.sh starts one), the
  rules file the README shows.
- or LISTED below by an exact fingerprint (its first line and the SHA-256
  of its text) with why it cannot run in a test.

A command block that is neither run nor listed fails, and so does a listed
or run block that is no longer there.  Without unshare (or with
SLUICE_README_NO_UNSHARE=1) the fixed ports are rewritten to free ones,
in the blocks and in the copied examples, and the output says so: the
blocks still run, and a server that daemonizes itself (nginx) is stopped
through its pid file.
"""

import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SLUICE_BUILD", os.path.join(ROOT, "build"))
DOCS = ["README.md", "docs/fleet.md"]
SLOW = float(os.environ.get("SLUICE_E2E_SLOW", "1"))
DEADLINE = 120 * SLOW        # seconds for one scenario, every block of it
READY_SECONDS = 30 * SLOW    # for one background server to say it is ready
READY_MARKS = ('msg="ready"', "Ready to accept connections")
PROGRAMS = {"sluiced", "sluicectl", "redis-cli", "redis-server", "nginx", "curl", "make",
            "cc", "sudo", "cd", "mkdir", "printf", "echo"}

# Blocks that cannot run in a test: (file, first line, SHA-256 prefix of the
# whole block, why).  Change a block and its fingerprint here changes too.
LISTED = [
    ("docs/fleet.md", "bench/lease.sh --quick             # 35 s", "9155feac9916",
     "a benchmark: nine sluiced, Redis and redis-benchmark for half a minute each way, "
     "its tables quoted as a smoke run (bench/lease.sh is not a test)"),
    ("README.md", "./scripts/run.sh", "6fb5a1b8a45e",
     "installs packages (sudo apt-get), builds, and serves in the foreground until "
     "Ctrl-C; test_readme.sh checks the script is there"),
    ("README.md", "./scripts/test.sh", "5e3a55ff9a14",
     "runs the whole suite, this test included"),
    ("README.md", "build/sluiced --rules /etc/sluice/rules      # a file, or a folder of *.yaml",
     "3a14101770e2",
     "the reader's own rules folder, served in the foreground; the RL.CHECK transcript "
     "is run below against build/sluiced --rules with the README's rules"),
    ("README.md", "sluicectl replay --algo ALGO --limit L --window W [--burst B] [--precision P]",
     "0ab26df38d64", "a synopsis: the capitals and brackets are placeholders"),
    ("README.md", "$ printf '0 alice\\n0 alice\\n0 alice\\n0 alice\\n1000 alice\\n' |",
     "65197d594eb1", "run by test_readme.sh itself, its output compared whole"),
    ("README.md", "make && sudo make install            # or: make install PREFIX=$HOME/.local "
     "(below, \"Install\")", "f1cacab7a1db",
     "installs into the system as root; tests/test_install.sh runs make install "
     "PREFIX=<scratch> and these cc lines as written"),
    ("README.md", "make && sudo make install         # PREFIX=/usr/local", "97942bf1bc9b",
     "installs into the system as root or into $HOME; tests/test_install.sh installs to a "
     "scratch PREFIX and uninstalls"),
    ("README.md", "sudo cp /usr/local/share/doc/sluice/examples/sluiced.service "
     "/etc/systemd/system/", "377b029b16a0",
     "changes the machine's systemd; tests/test_install.sh checks the unit with "
     "systemd-analyze verify and security"),
    ("docs/fleet.md", "build/sluiced --backend redis-cluster://10.0.0.1:7000,10.0.0.2:7000",
     "b71c4e61971c", "a cluster on the reader's network; tests/e2e/test_cluster.py runs one"),
    ("docs/fleet.md", "build/sluiced --backend redis://10.0.0.1:6379,redis://10.0.0.2:6379,"
     "redis://:pw@10.0.0.3:6379/2", "a69b0dd9078b",
     "servers on the reader's network; tests/e2e/test_ring.py runs a ring"),
]

TALLY = {"ok": 0, "bad": 0}


def ok(name):
    TALLY["ok"] += 1
    print("ok    " + name, flush=True)


def bad(name, detail=""):
    TALLY["bad"] += 1
    print("FAIL  " + name, flush=True)
    for line in str(detail).splitlines()[:80]:
        print("        " + line, flush=True)


# ---- the blocks ---------------------------------------------------------------

class Block:
    def __init__(self, doc, line, lang, text):
        self.doc, self.line, self.lang, self.text = doc, line, lang, text
        self.first = next((l for l in text.splitlines() if l.strip()), "")
        self.sha = hashlib.sha256(text.encode()).hexdigest()[:12]

    def where(self):
        return "%s:%d" % (self.doc, self.line)

    def is_command(self):
        if self.lang in ("sh", "shell", "bash", "console"):
            return True
        if self.lang:  # c, yaml, ...
            return False
        if self.first.startswith("$ "):
            return True
        word = self.first.split()[0] if self.first.split() else ""
        return word in PROGRAMS or "/" in word or shutil.which(word) is not None


def blocks(doc):
    """Every fenced and indented code block of doc, in order."""
    lines = open(os.path.join(ROOT, doc), encoding="utf-8").read().split("\n")
    out, i, prev_blank = [], 0, True
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            out.append(Block(doc, i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n"))
            i, prev_blank = j + 1, False
            continue
        if prev_blank and lines[i].startswith("    ") and lines[i].strip():
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while j > i and not lines[j - 1].strip():
                j -= 1
            text = "\n".join(l[4:] for l in lines[i:j]) + "\n"
            out.append(Block(doc, i + 1, None, text))
            i, prev_blank = j, False
            continue
        prev_blank = not lines[i].strip()
        i += 1
    return out


def steps(text):
    """A block's command lines, as a reader pastes them: comments-only and
    blank lines dropped, a line ending in \\ or | joined to the next."""
    out, cur = [], ""
    for line in text.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur = cur + "\n" + line if cur else line
        if re.search(r"(\\|\|)\s*$", line):
            continue
        out.append(cur)
        cur = ""
    if cur:
        out.append(cur)
    return out


def transcript(text):
    """A `$ ` transcript: [(command, [output lines])]."""
    out = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append([line[2:], []])
        elif out and out[-1][0].rstrip().endswith("|") and not out[-1][1]:
            out[-1][0] += "\n" + line
        elif out:
            out[-1][1].append(line)
    return out


def strip_comment(line):
    """The command without a trailing `   # ...` comment."""
    return re.sub(r"\s+#[^'\"]*$", "", line)


# ---- running a scenario in a namespace ---------------------------------------------

def have_unshare():
    """The unshare command line that works here (a list), or None.  As
    root: new network, PID and mount namespaces.  Otherwise a user namespace
    too, with the user's subordinate ids mapped when there are some
    (--map-auto: nginx's master, root in there, can then switch its workers
    to nobody), else only root mapped."""
    if os.environ.get("SLUICE_README_NO_UNSHARE") == "1" or shutil.which("unshare") is None:
        return None
    base = ["unshare", "-n", "-p", "-f", "-m", "--mount-proc", "--kill-child"]
    tries = [base] if os.geteuid() == 0 else [base[:1] + ["-r", "--map-auto"] + base[1:],
                                              base[:1] + ["-r"] + base[1:]]
    for argv in tries:
        p = subprocess.run(argv + ["true"], capture_output=True, timeout=30)
        if p.returncode == 0:
            return argv
    return None


PORTS = [6379, 6390, 6391, 8080, 8081, 8390, 8391, 8392, 8393]


class Scenario:
    """One run: a scratch tree, a driver script of numbered steps, their
    outputs in steps/out.N and steps/err.N."""

    def __init__(self, name, namespace):
        self.name = name
        self.namespace = namespace
        self.dir = tempfile.mkdtemp(prefix="sluice-readme-")
        os.chmod(self.dir, 0o755)  # nginx's workers may run as another user
        self.tree = os.path.join(self.dir, "tree")
        shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(self.tree, "examples"),
                        ignore=shutil.ignore_patterns("logs", "*.pid"))
        os.symlink(BUILD, os.path.join(self.tree, "build"))
        os.mkdir(os.path.join(self.dir, "steps"))
        self.lines = ["cd '%s' || exit 1" % self.tree, "%s '%s' lo-up" % (sys.executable, __file__)]
        self.n = 0
        self.ports = {}
        if not namespace:
            self.ports = {p: free_port() for p in PORTS}
            for dirpath, _dirs, files in os.walk(os.path.join(self.tree, "examples")):
                for f in files:
                    path = os.path.join(dirpath, f)
                    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
                        text = fh.read()
                    with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
                        fh.write(self.rewrite(text))

    def rewrite(self, text, command=False):
        if not self.ports:
            return text
        text = re.sub(r"\b(%s)\b" % "|".join(str(p) for p in PORTS),
                      lambda m: str(self.ports[int(m.group(1))]), text)
        # a sluiced without the option takes the default port: name it
        def defaults(m):
            cmd = m.group(0)
            for opt, port in (("--port", 6390), ("--http-port", 8390), ("--grpc-port", 8391)):
                if opt + " " not in cmd:
                    cmd = cmd.replace("sluiced", "sluiced %s %d" % (opt, self.ports[port]), 1)
            return cmd
        if not command:
            return text
        return re.sub(r"(?:^|(?<=[;&|] ))(?:\S*/)?sluiced(?= )[^\n&;|]*", defaults, text)

    def file(self, path, text):
        full = os.path.join(self.tree, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(self.rewrite(text))

    def step(self, line):
        """Adds one command line; returns its number."""
        self.n += 1
        out = os.path.join(self.dir, "steps", "out.%d" % self.n)
        err = os.path.join(self.dir, "steps", "err.%d" % self.n)
        line = self.rewrite(line, command=True)
        self.lines.append("{ %s\n} >'%s' 2>'%s'" % (line, out, err))
        if re.search(r"&\s*(#.*)?$", line):
            self.lines.append("%s '%s' wait-ready $! '%s' '%s' || exit 1"
                              % (sys.executable, __file__, out, err))
        return self.n

    def output(self, n, which="out"):
        path = os.path.join(self.dir, "steps", "%s.%d" % (which, n))
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def run(self):
        """Runs every step; returns (finished, what the driver printed)."""
        driver = os.path.join(self.dir, "driver.sh")
        with open(driver, "w") as f:
            f.write("\n".join(self.lines) + "\necho SLUICE-DRIVER-DONE\n")
        argv = ["/bin/sh", driver]
        if self.namespace:
            argv = self.namespace + argv
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=DEADLINE)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            self.kill_daemons()
        if timed_out:
            out, _ = p.communicate()
        text = out.decode("utf-8", "replace")
        if timed_out:
            text += "\n(stopped after %d s)" % DEADLINE
        return "SLUICE-DRIVER-DONE" in text and not timed_out, text

    def kill_daemons(self):
        """Without a PID namespace: what left our group (nginx), by its pid
        file (TERM: nginx stops its workers), then every process still
        working in the scratch tree (a worker whose master is gone)."""
        if self.namespace:
            return
        for dirpath, _dirs, files in os.walk(self.tree):
            for f in files:
                if f.endswith(".pid"):
                    try:
                        pid = int(open(os.path.join(dirpath, f)).read().strip())
                        os.kill(pid, signal.SIGTERM)
                    except (ValueError, OSError):
                        continue
                    until = time.monotonic() + 10 * SLOW
                    while time.monotonic() < until and os.path.exists("/proc/%d" % pid):
                        time.sleep(0.05)
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cwd = os.readlink("/proc/%s/cwd" % pid)
            except OSError:
                continue
            if cwd == self.tree or cwd.startswith(self.tree + "/"):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass

    def cleanup(self):
        shutil.rmtree(self.dir, True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- helpers run inside the namespace ---------------------------------------------

def lo_up():
    """ip link set lo up, without ip(8)."""
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ifr = struct.pack("16sH14x", b"lo", 0)
    flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def wait_ready(pid, out, err):
    """Waits until the server started in the background says it is ready
    (in its step's output), as a reader waits for it; 1 if it died first
    or never said so."""
    until = time.monotonic() + READY_SECONDS
    while time.monotonic() < until:
        text = ""
        for path in (out, err):
            try:
                text += open(path, encoding="utf-8", errors="replace").read()
            except FileNotFoundError:
                pass
        if any(m in text for m in READY_MARKS):
            return 0
        try:
            os.kill(pid, 0)
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(") ")[-1].startswith("Z"):
                    raise ProcessLookupError
        except (ProcessLookupError, FileNotFoundError):
            print("the server started in the background (pid %d) exited:\n%s" % (pid, text))
            return 1
        time.sleep(0.05)
    print("the server started in the background (pid %d) did not say it was ready "
          "within %d s:\n%s" % (pid, READY_SECONDS, text))
    return 1


# ---- the checks ---------------------------------------------------------------

def ints(text):
    return [int(l) for l in (text or "").splitlines() if re.fullmatch(r"-?\d+", l.strip())]


def find(blocks_, doc, pred, what):
    found = [b for b in blocks_ if b.doc == doc and pred(b)]
    if len(found) != 1:
        bad("%s: %s: %d such blocks, want 1" % (doc, what, len(found)))
        return None
    return found[0]


def attempt(name, namespace, build, check, tries=1):
    """Runs a scenario (build(sc) adds its steps, check(sc) returns None when
    right, "again" when the wall clock's minute turned during the run, or
    what is wrong); up to `tries` times when the minute turned."""
    for n in range(tries):
        sc = Scenario(name, namespace)
        try:
            build(sc)
            finished, driver = sc.run()
            why = check(sc)
            if why == "again" and n + 1 < tries:
                continue
            if not finished:
                why = (why or "") + "\nthe block did not run to its end:\n" + driver
            if why:
                bad(name, why + "\n" + steps_dump(sc))
            else:
                ok(name)
            return
        finally:
            sc.cleanup()


def steps_dump(sc):
    out = []
    for i in range(1, sc.n + 1):
        for which in ("out", "err"):
            t = sc.output(i, which)
            if t:
                out.append("--- step %d %s:\n%s" % (i, which, t[-1500:]))
    return "\n".join(out)


def check_int_comments(sc, numbered, prefix=""):
    """`cmd   # 1 5 4 ...`: the step's integers start with those numbers."""
    wrong = []
    for n, line in numbered:
        m = re.search(r"#\s*((?:-?\d+\s+)+)\.\.\.\s*$", line)
        if m:
            want = [int(x) for x in m.group(1).split()]
            got = ints(sc.output(n))
            if got[:len(want)] != want:
                wrong.append("%s%s: got %s, the doc shows %s" % (prefix, line, got, want))
    return "\n".join(wrong) or None


def main():
    all_blocks = []
    for doc in DOCS:
        all_blocks += blocks(doc)
    commands = [b for b in all_blocks if b.is_command()]
    namespace = have_unshare()
    if namespace:
        print("      blocks run in private namespaces: %s" % " ".join(namespace))
    else:
        print("NOTE  no unshare here (or SLUICE_README_NO_UNSHARE=1): the blocks' fixed ports are "
              "rewritten to free ones, in the blocks and the copied examples")
    claimed = {}

    def claim(b, how):
        if b is not None:
            claimed[id(b)] = how

    # ---- listed blocks: each still there, exactly
    for doc, first, sha, why in LISTED:
        hits = [b for b in commands if b.doc == doc and b.first == first]
        if len(hits) != 1:
            bad("listed block of %s '%s': %d found, want 1 (remove it from LISTED, or list "
                "the new text)" % (doc, first, len(hits)))
            continue
        b = hits[0]
        if b.sha != sha:
            bad("listed block %s '%s' changed: fingerprint %s, listed %s (run it, or list the "
                "new text)" % (b.where(), first, b.sha, sha))
        claim(b, "listed")

    # ---- README: two fleet nodes on one Redis
    b = find(commands, "README.md", lambda b: "--backend redis://127.0.0.1:6379" in b.text,
             "the fleet example")
    claim(b, "run")
    if b is not None:
        def build(sc, b=b):
            sc.step("redis-server --port 6379 --save '' --appendonly no &")  # the precondition
            sc.numbered = [(sc.step(s), s) for s in steps(b.text)]

        def check(sc, b=b):
            m = re.search(r"# remaining (\d+), then (\d+)", b.text)
            if m is None:
                return "no '# remaining N, then M' comment in the block"
            got = ints(sc.output(sc.numbered[-1][0]))
            want = [int(m.group(1)), int(m.group(2))]
            if len(got) != 12 or [got[0], got[6]] != [1, 1] or [got[2], got[8]] != want:
                return "two decisions with remaining %s wanted, got %s" % (want, got)
            return None
        attempt("README %s: two fleet nodes on one Redis (a Redis on 6379 first): remaining 4, "
                "then 3" % b.where(), namespace, build, check)

    # ---- docs/fleet.md: two nodes in a few lines
    b = find(commands, "docs/fleet.md", lambda b: b.first.startswith("redis-server --port 6379"),
             "'Two nodes in a few lines'")
    claim(b, "run")
    if b is not None:
        def build(sc, b=b):
            sc.numbered = [(sc.step(s), s) for s in steps(b.text)]

        def check(sc):
            shown = [x for x in sc.numbered if re.search(r"#\s*(-?\d+\s+)+\.\.\.", x[1])]
            if len(shown) != 2:
                return "want two lines showing their answer, found %d" % len(shown)
            return check_int_comments(sc, sc.numbered)
        attempt("docs/fleet.md %s: two nodes in a few lines, answers as shown" % b.where(),
                namespace, build, check)

    # ---- README: the server's transcript (a sluiced on 6390, as ./scripts/run.sh starts)
    b = find(commands, "README.md", lambda b: b.first.startswith("$ redis-cli -p 6390 RL.ALLOW"),
             "the RL.ALLOW transcript")
    claim(b, "run")
    if b is not None:
        def build(sc, b=b):
            sc.step("build/sluiced &")
            sc.tr = [(sc.step(cmd), cmd, shown) for cmd, shown in transcript(b.text)]

        def check(sc):
            for n, cmd, shown in sc.tr:
                want = [int(x) for x in re.findall(r"\(integer\) (-?\d+)", "\n".join(shown))]
                got = ints(sc.output(n))
                if not want or got != want:
                    return "%s: got %s, the README shows %s" % (cmd, got, want)
            return None
        attempt("README %s: RL.ALLOW on a sluiced at 6390 answers as shown" % b.where(),
                namespace, build, check)

    # ---- README: the RL.CHECK transcript, on the README's rules
    b = find(all_blocks, "README.md", lambda b: b.first.startswith("$ redis-cli -p 6390 RL.CHECK"),
             "the RL.CHECK transcript")
    rules = find(all_blocks, "README.md", lambda b: b.lang == "yaml" and "domain: api" in b.text,
                 "the rules example")
    claim(b, "run")
    if b is not None and rules is not None:
        def build(sc, b=b, rules=rules):
            sc.file("api.yaml", rules.text)
            sc.step("build/sluiced --rules api.yaml &")
            sc.tr = [(sc.step(cmd), cmd, shown) for cmd, shown in transcript(b.text)]

        def check(sc):
            # reset_after_ms (the 5th field, and each descriptor's 6th) counts
            # down to the end of a window on the clock: not compared
            skip = {4, 11, 17}
            for n, cmd, shown in sc.tr:
                want = re.findall(r'\(integer\) (-?\d+)|"([^"]*)"', "\n".join(shown))
                want = [a or c for a, c in want]
                got = [l for l in (sc.output(n) or "").splitlines() if l != ""]
                if len(got) != len(want) or any(
                        g != w for i, (g, w) in enumerate(zip(got, want)) if i not in skip):
                    return "%s:\ngot  %s\nREADME %s" % (cmd, got, want)
            return None
        attempt("README %s: RL.CHECK with the README's rules answers as shown (but the "
                "clock's reset_after)" % b.where(), namespace, build, check)

    # ---- README: sluicectl replay --rules on docs/replay.md's files
    b = find(commands, "README.md",
             lambda b: b.first.startswith("$ build/sluicectl replay --rules edge.yaml"),
             "the replay --rules example")
    claim(b, "run")
    if b is not None:
        rp = blocks("docs/replay.md")
        src = open(os.path.join(ROOT, "docs/replay.md"), encoding="utf-8").read().split("\n")
        edge = [x for x in rp if x.lang == "yaml" and x.first == "domain: edge"]
        log = [x for x in rp if x.lang == "" and src[x.line - 3].strip() == "`access.log`:"]
        if len(edge) != 1 or len(log) != 1:
            bad("README %s: docs/replay.md's edge.yaml (%d) and access.log (%d) blocks, want one "
                "each" % (b.where(), len(edge), len(log)))
        else:
            def build(sc, b=b):
                sc.file("edge.yaml", edge[0].text)
                sc.file("access.log", log[0].text)
                sc.tr = [(sc.step(cmd), cmd, shown) for cmd, shown in transcript(b.text)]

            def check(sc):
                n, cmd, shown = sc.tr[0]
                got = [l.rstrip() for l in ((sc.output(n) or "") +
                                            (sc.output(n, "err") or "")).splitlines()]
                want = [l.rstrip() for l in shown if l.strip() and l.strip() != "..."]
                i = 0
                for line in got:
                    if i < len(want) and line == want[i]:
                        i += 1
                if i < len(want):
                    return "%s: the README's line not printed (in order): %r" % (cmd, want[i])
                return None
            attempt("README %s: sluicectl replay --rules on docs/replay.md's edge.yaml and "
                    "access.log prints the lines shown" % b.where(), namespace, build, check)

    # ---- README: nginx in front, then the 4th curl, then the prose's replay
    b = find(commands, "README.md", lambda b: b.first == "cd examples/nginx", "the nginx example")
    claim(b, "run")
    if b is not None:
        readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
        replay = re.findall(r"`(\.\./\.\./build/sluicectl replay [^`]*)`", readme)

        def build(sc, b=b):
            sc.numbered = [(sc.step(s), s) for s in steps(b.text)]
            curl = [s for s in steps(b.text) if s.startswith("curl ")]
            sc.curls = [sc.numbered[-1][0]] + [sc.step(strip_comment(curl[0]))
                                               for _ in range(3)] if curl else []
            sc.replay = sc.step(replay[0]) if len(replay) == 1 else None

        def check(sc, b=b):
            if len(sc.curls) != 4 or sc.replay is None:
                return "want one curl line in the block and one replay command after it"
            if "4th time in a minute: 429, Retry-After" not in b.text:
                return "the block no longer says what the 4th time gives"
            heads = [(sc.output(n) or "").split("\n\n")[0] for n in sc.curls]
            dates = [re.search(r"^Date: .* (\d\d:\d\d):\d\d GMT", h, re.M) for h in heads]
            if all(dates) and dates[0].group(1) != dates[-1].group(1):
                return "again"  # the minute's window turned between the requests
            status = [h.split("\n")[0] for h in heads]
            if status != ["HTTP/1.1 200 OK"] * 3 + ["HTTP/1.1 429 Too Many Requests"]:
                return "statuses %s" % status
            m = re.search(r"^Retry-After: (\d+)$", heads[3], re.M)
            if m is None or not 1 <= int(m.group(1)) <= 60:
                return "the 429 has no Retry-After of 1 to 60 s:\n" + heads[3]
            if not re.search(r'^RateLimit: "edge\.', heads[3], re.M):
                return "the 429 has no RateLimit header:\n" + heads[3]
            allowed = [l.split()[0] for l in (sc.output(sc.replay) or "").splitlines()]
            if allowed != ["1", "1", "1", "0"]:
                return "the replay of nginx's log: allowed %s, want 1 1 1 0" % allowed
            return None
        # nginx's master, root in a user namespace with only root mapped,
        # cannot hand its folders and workers to nobody: run it as this
        # user instead, on rewritten ports
        ns = namespace
        if namespace and "-r" in namespace and "--map-auto" not in namespace:
            print("NOTE  the nginx example runs outside the namespaces, its fixed ports "
                  "rewritten to free ones (no subordinate ids for this user: nginx could not "
                  "switch to nobody in a user namespace)")
            ns = None
        attempt("README %s: nginx in front of sluiced: 200 three times, then 429 with "
                "Retry-After and RateLimit; replaying its log decides the same" % b.where(),
                ns, build, check, tries=3)

    # ---- no bare sluiced/sluicectl before any install: build/sluiced, ...
    synopsis = {(d, f) for d, f, _sha, why in LISTED if why.startswith("a synopsis")}
    bare = ["%s: %s" % (b.where(), l.strip()) for b in commands
            if (b.doc, b.first) not in synopsis
            for l in b.text.splitlines()
            if not b.first.startswith("$ ") or l.startswith("$ ")
            if re.search(r"(^|[;&|(]\s*|^\$ |&& |sudo )(sluiced|sluicectl)\b", l.strip())]
    if bare:
        bad("a command block runs sluiced or sluicectl by its bare name (not on PATH before "
            "`make install`: write build/sluiced, build/sluicectl)", "\n".join(bare))
    else:
        ok("no command block runs a bare sluiced or sluicectl (build/sluiced, build/sluicectl)")

    # ---- nothing left over
    left = [b for b in commands if id(b) not in claimed]
    for b in left:
        bad("%s: a command block neither run nor listed (tests/readme_blocks.py: run it, or add "
            "(%r, %r, %r, why) to LISTED)" % (b.where(), b.doc, b.first, b.sha))
    if not left:
        ok("every command block of %s is run (%d) or listed with why (%d)"
           % (" and ".join(DOCS), sum(1 for v in claimed.values() if v == "run"),
              sum(1 for v in claimed.values() if v == "listed")))
    return 1 if TALLY["bad"] else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "lo-up":
        try:
            lo_up()
        except OSError:
            pass  # without a namespace: lo is up already
        sys.exit(0)
    if len(sys.argv) == 5 and sys.argv[1] == "wait-ready":
        sys.exit(wait_ready(int(sys.argv[2]), sys.argv[3], sys.argv[4]))
    sys.exit(main())
