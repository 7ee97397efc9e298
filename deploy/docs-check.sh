#!/usr/bin/env bash
# The docs check (deploy/test.sh runs it): what README.md, CONTRIBUTING.md, CHANGELOG.md,
# BENCHMARKS.md and docs/*.md name must exist and must speak of the product.
#   - every repository path they name in backticks (deploy/..., rocev2d/..., docs/..., a glob
#     too) and every relative link exists;
#   - every `--example NAME` they run is an example of some crate;
#   - no machine paths (/work/, /home/, /root/) and no issue numbers ("issue 18"), which a
#     user cannot look up;
#   - every tool in README.md's Tools table exists, and every flag or subcommand named beside
#     it appears in its `--help` (the binaries are built first, with the tests; the preloaded
#     library's variable must be read by its source);
#   - README.md links every docs/*.md page;
#   - no issue numbers in the code either (sources, scripts, manifests).
# Prints each finding as FILE:LINE: what, and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - README.md CONTRIBUTING.md CHANGELOG.md BENCHMARKS.md docs/*.md <<'EOF'
import glob, os, re, sys

TOP = {e for e in os.listdir(".") if not e.startswith(".") and e != "target"} | {".ci"}
EXAMPLES = {os.path.splitext(os.path.basename(p))[0]
            for p in glob.glob("**/examples/**/*.rs", recursive=True) if "target/" not in p}
# Placeholders stand for a value the reader picks: <name>, {a,b}, IFACE, OUT, VARIANT.
PLACEHOLDER = re.compile(r"[<{]|(?:^|/)[A-Z][A-Z_]+(?:/|$|[.-])")
BACKTICK = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
EXAMPLE = re.compile(r"--example\s+([A-Za-z0-9_-]+)")
MACHINE = re.compile(r"(?<![\w.])/(?:work|home|root)/")
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.I)

findings = []
for doc in sys.argv[1:]:
    base = os.path.dirname(doc)
    in_code = False
    for n, line in enumerate(open(doc, encoding="utf-8"), 1):
        say = lambda what: findings.append(f"{doc}:{n}: {what}")
        if line.lstrip().startswith("```"):
            in_code = not in_code
        for m in MACHINE.finditer(line):
            say(f"machine path: {line[m.start():].split()[0]}")
        for m in ISSUE.finditer(line):
            say(f"issue number: '{m.group(0)}'")
        for name in EXAMPLE.findall(line):
            if name not in EXAMPLES and not name.isupper():
                say(f"no example named {name}")
        tokens = [] if in_code else BACKTICK.findall(line)
        for tok in tokens:
            path = tok.rstrip(".,:;)").split("::")[0]
            first = path.split("/")[0]
            if "/" not in path or first not in TOP or PLACEHOLDER.search(path):
                continue
            if not glob.glob(path.rstrip("/")):
                say(f"no such path: {path}")
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(base, target))):
                say(f"broken link: {target}")

# README.md's Docs index links every page.
readme = open("README.md", encoding="utf-8").read()
for page in sorted(glob.glob("docs/*.md")):
    if f"]({page})" not in readme:
        findings.append(f"README.md: no link to {page}")

for f in findings:
    print(f)
if findings:
    print(f"docs-check: {len(findings)} findings", file=sys.stderr)
    sys.exit(1)
print("docs-check: README, CONTRIBUTING, CHANGELOG and docs/ name only what exists")
EOF

# Code speaks of the product too: no issue numbers in the sources, scripts and manifests git
# tracks (this script names the pattern, so it is left out).
if git ls-files '*.rs' '*.sh' '*.toml' '*.py' '*.yaml' | grep -v '^deploy/docs-check.sh$' |
    xargs grep -nIiE '\bissues? #?[0-9]+' 2>/dev/null; then
    echo "docs-check: issue numbers in the code (above)" >&2
    exit 1
fi

# The Tools table against the tools themselves. The binaries are built as the test suite
# builds them (the same features, dev-dependencies included), so that deploy/test.sh's test
# step finds every crate already built instead of building the workspace a second time.
cargo test -q --workspace --exclude rocev2-ebpf --all-features --no-run
BIN="${CARGO_TARGET_DIR:-target}/debug"
python3 - "$BIN" <<'EOF'
import re, subprocess, sys
bin_dir = sys.argv[1]
rows, in_tools = [], False
for line in open("README.md", encoding="utf-8"):
    if line.startswith("## "):
        in_tools = line.strip() == "## Tools"
    elif in_tools and line.startswith("| `"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((re.findall(r"`([^`]+)`", cells[0]), re.findall(r"`([^`]+)`", cells[2])))
findings = []
if len(rows) < 10:
    findings.append(f"README.md's Tools table has {len(rows)} rows")
for tools, flags in rows:
    for tool in tools:
        if tool.endswith(".so"):
            pattern = sum([["-e", f] for f in flags], [])
            src = subprocess.run(["grep", "-rlF", *pattern, "rocev2d/ibverbs/src"],
                                 capture_output=True, text=True)
            if not src.stdout:
                findings.append(f"{tool}: its source reads none of {flags}")
            continue
        try:
            out = subprocess.run([f"{bin_dir}/{tool}", "--help"], capture_output=True,
                                 text=True, timeout=30)
        except FileNotFoundError:
            findings.append(f"{tool}: no such binary in {bin_dir}")
            continue
        text = out.stdout + out.stderr
        for flag in flags:
            if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text):
                findings.append(f"{tool}: --help does not mention {flag}")
for f in findings:
    print(f"README.md Tools: {f}")
if findings:
    sys.exit(1)
print(f"docs-check: the {sum(len(t) for t, _ in rows)} tools of README.md's Tools table take what it says")
EOF
