#!/usr/bin/env bash
# The docs check (deploy/test.sh runs it): what README.md, CONTRIBUTING.md, CHANGELOG.md and
# docs/*.md name must exist and must speak of the product.
#   - every repository path they name in backticks (deploy/..., rocev2d/..., docs/..., a glob
#     too) and every relative link exists;
#   - every `--example NAME` they run is an example of some crate;
#   - no machine paths (/work/, /home/, /root/) and no issue numbers ("issue 18"), which a
#     user cannot look up.
# Prints each finding as FILE:LINE: what, and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - README.md CONTRIBUTING.md CHANGELOG.md docs/*.md <<'EOF'
import glob, os, re, sys

TOP = {e for e in os.listdir(".") if not e.startswith(".")} | {".ci"}
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

for f in findings:
    print(f)
if findings:
    print(f"docs-check: {len(findings)} findings", file=sys.stderr)
    sys.exit(1)
print("docs-check: README, CONTRIBUTING, CHANGELOG and docs/ name only what exists")
EOF
