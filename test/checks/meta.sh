#!/usr/bin/env bash
# test/checks/meta.sh: the release metadata agrees with the extension
# (PGXN).  PGXN's own validator (PGXN::Meta::Validator) is on CPAN,
# out of reach here, so this checks what it checks that matters, with
# /usr/bin/python3 and its json module only, then asks PostgreSQL itself.
#
# 1. META.json, against the PGXN Meta Spec 1.0.0 (https://pgxn.org/spec/):
#    - it is JSON, an object; the required fields are there and well formed:
#      name (a term: 2+ characters, no slash, backslash, space or control
#      character), abstract, maintainer (a string or a list of them), version
#      (a semantic version, x.y.z), license (a known short name, a list of
#      them, or an object of name -> URL), provides (each extension with a
#      file and a semantic version; file and docfile exist in the tree),
#      meta-spec (version 1.0.0);
#    - optional fields that are present are well formed: release_status
#      (stable, testing, unstable), prereqs (phase -> relationship -> name
#      -> version range), tags, no_index, resources;
#    - no key outside the spec but x_/X_ custom keys.
# 2. Versions agree: META.json's version and provides.fence.version are
#    fence.control's default_version as a semantic version (1.1 -> 1.1.0);
#    debian/changelog's newest entry (if debian/ exists) is that version;
#    CHANGELOG.md has a "## <default_version>" entry; release_status is not
#    "stable" while that entry says "(unreleased)", and is "stable" once it
#    does not.
# 3. Scripts: fence--<default_version>.sql exists, or a base script
#    fence--X.sql with a chain of fence--A--B.sql scripts from X to it; from
#    every released version (each "## V" of CHANGELOG.md not marked
#    unreleased, older than the default) a chain of fence--A--B.sql scripts
#    reaches the default version, so ALTER EXTENSION fence UPDATE has a path
#    from each; every fence--*.sql is in the Makefile's DATA and every DATA
#    file exists.
# 4. PostgreSQL (a throwaway cluster, fence as installed from this tree):
#    pg_available_extension_versions offers every released version and the
#    default; pg_extension_update_paths has a path from each released version
#    to the default; in a fresh database CREATE EXTENSION fence VERSION 'V'
#    then ALTER EXTENSION fence UPDATE ends at the default version, and a
#    plain CREATE EXTENSION fence installs the default version.
# One line per assertion ("ok     ..." or "FAILED ..."), then a summary line.
# Exit 0 only if every assertion holds.
#
# Environment: FENCE_SRC (else this tree), FENCE_PORT (else 54362),
# FENCE_WORK, FENCE_KEEP=1.  Standalone it expects fence to be installed.
#
# fence-check-timeout: 120
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
. "${FENCE_LIB:-$here/../lib.sh}"
fence_need_root "$0" "$@"
fence_pg_setup

src=${FENCE_SRC:-$(cd "$here/../.." && pwd)}
py=/usr/bin/python3
[ -x "$py" ] || fence_die "$py not found"

own_work=0
work=${FENCE_WORK:-}
if [ -z "$work" ]; then
	work=$(fence_mktemp_pg fence-meta)
	own_work=1
fi
dir=$work/meta
port=${FENCE_PORT:-$(fence_free_port 54362)}
cleanup()
{
	fence_cluster_stop "$dir" immediate
	[ "$own_work" = 1 ] && [ -z "${FENCE_KEEP:-}" ] && rm -rf "$work"
}
trap cleanup EXIT


# ===========================================================================
# 1-3: the static checks.  The Python part prints "ok ..." / "FAILED ..."
# lines, and on its last line "versions: DEFAULT RELEASED..." for part 4.
echo "--- META.json, versions, scripts ($src)"
static_out=$("$py" - "$src" <<'PY'
import json, os, re, sys
from collections import deque

src = sys.argv[1]
results = []


def ok(desc):
    results.append(("ok", desc))


def bad(desc):
    results.append(("FAILED", desc))


def note(desc):
    results.append(("note:", desc))


def check(desc, cond, detail=""):
    if cond:
        ok(desc)
    else:
        bad(desc + (": " + detail if detail else ""))


def read(path):
    with open(os.path.join(src, path), encoding="utf-8") as f:
        return f.read()


# Semantic Versioning 2.0.0 (the spec's Version), and the spec's Version
# Range: a version, or 0, optionally with an operator, AND-ed with commas.
SEMVER = (r"(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)"
          r"(?:-(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
          r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?")
RANGE_ITEM = r"(?:(?:[=!]=|[<>]=?)\s*)?(?:" + SEMVER + r"|0)"


def is_semver(v):
    return isinstance(v, str) and re.fullmatch(SEMVER, v) is not None


def is_range(v):
    if v == 0:
        return True
    return isinstance(v, str) and re.fullmatch(RANGE_ITEM + r"(?:,\s*" + RANGE_ITEM + r")*", v) is not None


def is_term(v):
    return isinstance(v, str) and re.fullmatch(r"[^/\\\s\x00-\x1f\x7f]{2,}", v) is not None


def nonempty_str(v):
    return isinstance(v, str) and len(v) > 0


def custom(k):
    return re.match(r"^[xX]_.", k) is not None


LICENSES = {"agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd",
            "freebsd", "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1",
            "lgpl_3_0", "mit", "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5",
            "postgresql", "qpl_1_0", "ssleay", "sun", "zlib", "open_source",
            "restricted", "unrestricted", "unknown"}
KNOWN_KEYS = {"name", "version", "abstract", "maintainer", "license", "provides",
              "meta-spec", "description", "generated_by", "tags", "no_index",
              "prereqs", "release_status", "resources"}

# --- fence.control
control = read("fence.control")
m = re.search(r"^\s*default_version\s*=\s*'([^']*)'", control, re.M)
default = m.group(1) if m else None
check("fence.control has a default_version", default is not None)
default = default or "?"
# the distribution version: default_version as x.y.z
parts = default.split(".")
default_semver = ".".join(parts + ["0"] * (3 - len(parts))) if 1 <= len(parts) <= 3 else default

# --- 1. META.json
meta = None
try:
    meta = json.loads(read("META.json"))
    check("META.json is a JSON object", isinstance(meta, dict))
except FileNotFoundError:
    bad("META.json exists")
except ValueError as e:
    bad("META.json is valid JSON: %s" % e)
if not isinstance(meta, dict):
    meta = {}

for key in ("name", "abstract", "maintainer", "version", "license", "provides", "meta-spec"):
    check("META.json has the required field %r" % key, key in meta)
extra = sorted(k for k in meta if k not in KNOWN_KEYS and not custom(k))
check("META.json has no key outside the spec (but x_ keys)", not extra, " ".join(extra))

check("name is a term and names the extension (fence)", is_term(meta.get("name")) and meta.get("name") == "fence",
      repr(meta.get("name")))
check("abstract is a non-empty string", nonempty_str(meta.get("abstract")))
mt = meta.get("maintainer")
check("maintainer is a string or a non-empty list of strings",
      nonempty_str(mt) or (isinstance(mt, list) and mt and all(nonempty_str(x) for x in mt)), repr(mt))
check("version %r is a semantic version" % meta.get("version"), is_semver(meta.get("version")))

lic = meta.get("license")
lic_ok = ((isinstance(lic, str) and lic in LICENSES)
          or (isinstance(lic, list) and lic and all(x in LICENSES for x in lic))
          or (isinstance(lic, dict) and lic and all(isinstance(v, str) and re.match(r"^[a-z][a-z0-9+.-]*:", v)
                                                     for v in lic.values())))
check("license %r is a known short name, a list of them, or name -> URL" % (lic,), lic_ok)
check("META.json names a license, not \"unknown\"", lic not in ("unknown", ["unknown"]), repr(lic))
license_path = os.path.join(src, "LICENSE")
license_text = open(license_path).read() if os.path.exists(license_path) else ""
check("LICENSE at the top of the tree says the PostgreSQL License, as META.json's %r does" % (lic,),
      lic == "postgresql" and "PostgreSQL License" in license_text)
copyright_path = os.path.join(src, "debian", "copyright")
copyright_text = open(copyright_path).read() if os.path.exists(copyright_path) else ""
check("debian/copyright's License is PostgreSQL", re.search(r"^License: PostgreSQL$", copyright_text, re.M) is not None)

ms = meta.get("meta-spec")
check("meta-spec.version is 1.0.0", isinstance(ms, dict) and ms.get("version") == "1.0.0", repr(ms))

prov = meta.get("provides")
check("provides is a non-empty object", isinstance(prov, dict) and len(prov) > 0)
if not isinstance(prov, dict):
    prov = {}
check("provides names the extension fence", "fence" in prov)
for ext, p in sorted(prov.items()):
    if not isinstance(p, dict):
        bad("provides.%s is an object" % ext)
        continue
    bad_keys = sorted(k for k in p if k not in ("file", "version", "abstract", "docfile") and not custom(k))
    check("provides.%s has only file, version, abstract, docfile" % ext, not bad_keys, " ".join(bad_keys))
    check("provides.%s.version %r is a semantic version" % (ext, p.get("version")), is_semver(p.get("version")))
    for fk in ("file", "docfile"):
        if fk in p or fk == "file":
            f = p.get(fk)
            check("provides.%s.%s %r exists in the tree" % (ext, fk, f),
                  nonempty_str(f) and not f.startswith("/") and os.path.isfile(os.path.join(src, f)))

if "release_status" in meta:
    check("release_status %r is stable, testing or unstable" % meta["release_status"],
          meta["release_status"] in ("stable", "testing", "unstable"))
if "prereqs" in meta:
    pr = meta["prereqs"]
    good = isinstance(pr, dict) and len(pr) > 0
    for ph, rels in (pr.items() if good else []):
        good = good and ph in ("configure", "build", "test", "runtime", "develop") and isinstance(rels, dict)
        for rel, deps in (rels.items() if good else []):
            good = (good and rel in ("requires", "recommends", "suggests", "conflicts")
                    and isinstance(deps, dict) and len(deps) > 0
                    and all(is_term(n) and is_range(v) for n, v in deps.items()))
    check("prereqs: phase -> relationship -> name -> version range", good, json.dumps(pr))
    pgreq = (pr.get("runtime", {}).get("requires", {}) if isinstance(pr, dict) else {}).get("PostgreSQL")
    check("prereqs.runtime.requires names a PostgreSQL version", pgreq is not None)
if "tags" in meta:
    t = meta["tags"]
    check("tags is a list of non-empty strings (at most 255 characters)",
          isinstance(t, list) and t and all(nonempty_str(x) and len(x) <= 255 for x in t))
if "no_index" in meta:
    ni = meta["no_index"]
    check("no_index has only file and directory lists",
          isinstance(ni, dict) and all((k in ("file", "directory") and isinstance(v, list)) or custom(k)
                                       for k, v in ni.items()))
if "resources" in meta:
    r = meta["resources"]
    check("resources has only homepage, bugtracker, repository (and x_ keys)",
          isinstance(r, dict) and r and all(k in ("homepage", "bugtracker", "repository") or custom(k) for k in r))
if "generated_by" in meta:
    check("generated_by is a non-empty string", nonempty_str(meta["generated_by"]))

# --- 2. versions agree
check("META.json version %r is default_version %r as x.y.z (%s)" % (meta.get("version"), default, default_semver),
      meta.get("version") == default_semver)
if isinstance(prov.get("fence"), dict):
    check("provides.fence.version %r is %s" % (prov["fence"].get("version"), default_semver),
          prov["fence"].get("version") == default_semver)
if os.path.isdir(os.path.join(src, "debian")):
    try:
        first = read("debian/changelog").splitlines()[0]
        dm = re.match(r"^(\S+) \(([^)]+)\)", first)
        dver = dm.group(2) if dm else None
        dpkg = dm.group(1) if dm else None
        # native: 1.1; with a Debian revision: 1.1-1; an epoch is kept off
        upstream = re.sub(r"^\d+:", "", dver or "").rsplit("-", 1)[0] if dver and "-" in dver else dver
        check("debian/changelog's newest version %r is default_version %r" % (dver, default), upstream == default)
        check("debian/changelog's source is fence", dpkg == "fence", repr(dpkg))
    except (FileNotFoundError, IndexError):
        bad("debian/changelog exists and has an entry")

changelog = read("CHANGELOG.md")
headings = re.findall(r"^##\s+(\d+(?:\.\d+)*)\b(.*)$", changelog, re.M)
versions = {v: rest for v, rest in headings}
check("CHANGELOG.md has an entry for %s" % default, default in versions, "headings: %s" % [v for v, _ in headings])
unreleased = "unreleased" in versions.get(default, "").lower()
status = meta.get("release_status", "stable")
if unreleased:
    check("release_status %r is not stable while CHANGELOG.md says %s is unreleased" % (status, default),
          status != "stable")
else:
    check("release_status %r is stable once CHANGELOG.md's %s entry is released" % (status, default),
          status == "stable")


def vkey(v):
    return tuple(int(x) for x in v.split("."))


released = sorted((v for v, rest in versions.items()
                   if "unreleased" not in rest.lower() and v != default and vkey(v) < vkey(default)), key=vkey)

# --- 3. install and upgrade scripts
scripts = sorted(f for f in os.listdir(src) if re.fullmatch(r"fence--.+\.sql", f))
base = {}
edges = {}
for f in scripts:
    m2 = re.fullmatch(r"fence--(.+)--(.+)\.sql", f)
    if m2:
        edges.setdefault(m2.group(1), []).append(m2.group(2))
    else:
        base[re.fullmatch(r"fence--(.+)\.sql", f).group(1)] = f


def path(frm, to):
    """Shortest chain of update scripts from frm to to, as a list of versions."""
    prev = {frm: None}
    q = deque([frm])
    while q:
        v = q.popleft()
        if v == to:
            chain = []
            while v is not None:
                chain.append(v)
                v = prev[v]
            return chain[::-1]
        for w in edges.get(v, []):
            if w not in prev:
                prev[w] = v
                q.append(w)
    return None


if default in base:
    ok("CREATE EXTENSION fence: fence--%s.sql installs the default version" % default)
else:
    via = [(b, path(b, default)) for b in sorted(base, key=vkey)]
    via = [(b, p) for b, p in via if p]
    check("CREATE EXTENSION fence: a base script and update chain reach %s" % default, bool(via),
          "no fence--%s.sql and no chain from %s" % (default, sorted(base)))
    if via:
        note("CREATE EXTENSION fence installs fence--%s.sql, then %s" % (
            via[0][0], " -> ".join(via[0][1])))
check("CHANGELOG.md names at least one released version before %s" % default, bool(released))
for v in released:
    p = path(v, default)
    check("ALTER EXTENSION fence UPDATE from released %s has a script chain: %s" % (
        v, " -> ".join(p) if p else "none"), p is not None)
    check("released %s can be installed (fence--%s.sql, or a chain to it)" % (v, v),
          v in base or any(path(b, v) for b in base))

mk = read("Makefile")
dm2 = re.search(r"^DATA\s*[:+]?=\s*((?:.*\\\n)*.*)$", mk, re.M)
data = dm2.group(1).replace("\\\n", " ").split() if dm2 else []
missing = [f for f in scripts if f not in data]
check("every fence--*.sql is in the Makefile's DATA (make install ships it)", not missing, " ".join(missing))
absent = [f for f in data if not os.path.isfile(os.path.join(src, f))]
check("every DATA file exists", not absent, " ".join(absent))

for st, desc in results:
    print("%-6s %s" % (st, desc))
print("versions: %s %s" % (default, " ".join(released)))
PY
)
rc=$?
grep -v '^versions: ' <<<"$static_out"
n_ok=$((n_ok + $(grep -c '^ok ' <<<"$static_out")))
n_fail=$((n_fail + $(grep -c '^FAILED ' <<<"$static_out")))
[ "$rc" = 0 ] || bad "the Python checks ran to the end (exit $rc)"
read -r default released <<<"$(sed -n 's/^versions: //p' <<<"$static_out")"

# ===========================================================================
echo "--- PostgreSQL: versions and update paths of the installed fence"
if [ -z "${default:-}" ]; then
	bad "no default version to check against PostgreSQL"
else
	mkdir -p "$dir"
	chown postgres:postgres "$dir"
	fence_cluster_init "$dir" "$port" "autovacuum = off" || exit 1
	fence_cluster_start "$dir" || exit 1
	val() { fence_psql "$dir" -d "${2:-postgres}" -XAtq -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
	check "pg_available_extensions: the installed fence.control's default is $default" \
		"$(val "SELECT default_version FROM pg_available_extensions WHERE name = 'fence'")" "$default"
	for v in $released; do
		check "pg_available_extension_versions offers released $v" \
			"$(val "SELECT count(*) FROM pg_available_extension_versions WHERE name = 'fence' AND version = '$v'")" 1
		check "pg_extension_update_paths: a path from $v to $default" \
			"$(val "SELECT path IS NOT NULL FROM pg_extension_update_paths('fence') WHERE source = '$v' AND target = '$default'")" t
		db=meta_$(tr -c '0-9a-z\n' _ <<<"$v")
		val "CREATE DATABASE $db" >/dev/null
		check "CREATE EXTENSION fence VERSION '$v' installs $v" \
			"$(val "CREATE EXTENSION fence VERSION '$v'; SELECT extversion FROM pg_extension WHERE extname = 'fence'" "$db")" "$v"
		# (an update may warn, as 1.0 -> 1.1 does of its PUBLIC grants;
		# t/010_install_script.pl checks what it says)
		check "then ALTER EXTENSION fence UPDATE ends at $default" \
			"$(val "SET client_min_messages = error; ALTER EXTENSION fence UPDATE; SELECT extversion FROM pg_extension WHERE extname = 'fence'" "$db")" "$default"
	done
	val "CREATE DATABASE meta_default" >/dev/null
	check "a plain CREATE EXTENSION fence installs $default" \
		"$(val "CREATE EXTENSION fence; SELECT extversion FROM pg_extension WHERE extname = 'fence'" meta_default)" "$default"
fi

total=$((n_ok + n_fail))
if [ "$n_fail" = 0 ]; then
	echo "meta: all $total assertions hold (META.json, versions ${default:-?}, update paths from ${released:-none})"
	exit 0
fi
echo "meta: $n_fail of $total assertions FAILED"
exit 1
