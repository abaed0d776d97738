#!/usr/bin/env python3
"""The host settings a real node changes, written down before it changes them and put back afterwards.

``hack/node.sh up`` runs ``record`` before it touches anything; ``hack/node.sh down`` runs ``undo`` once every
process it started is gone: it puts back what the record holds, names whatever still differs (and exits 1,
keeping the record for another try), and removes the record last.

What is recorded, and how each is put back:

- sysctls the node's components write (kubelet: kernel.panic, kernel.panic_on_oops, vm.overcommit_memory, ...;
  the CNI bridge: net.ipv4.ip_forward; kube-proxy: route_localnet, conntrack limits and timeouts; bridge-nf):
  each one that differs is written back.
- iptables, every table of both families (iptables-save, ip6tables-save): a chain named like the node's
  (``KUBE-*``, ``CNI-*``, ``TRAINGUARD-NODE-*``) that did not exist is emptied and deleted, and so is every rule of
  an older chain that jumps to one; nothing else is touched (the machine may have rules of its own, and never a
  whole table is flushed). A table the node brought into being (iptables-nft creates one on first use) is deleted
  with ``nft`` once it is empty again.
- mounts (/proc/self/mountinfo): a mount that is new and lies under one of the node's paths is unmounted, deepest
  first (kubelet's bind mount of its root dir, pod volumes, container root filesystems, network namespaces).
- network interfaces: new ones the node named (its bridges) and new veths attached to them are deleted.
- netfilter accounting objects (``nfacct``): kube-proxy's two counters are deleted once no rule uses them.
- cgroups: new top-level directories the node named (its cgroup root) are removed in every hierarchy, bottom-up.
- paths the node writes: a path that did not exist is removed whole; one that existed keeps everything but the
  entries the node made in it (kubelet's log symlinks, the CNI result cache of the node's network).

Standard library only: it runs before the project's virtualenv exists, as root, with the system ``python3``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# The sysctls a node's components are known to set (kubelet's setupKernelTunables, kube-proxy's conntrack and
# route_localnet, the CNI bridge's forwarding), plus bridge-nf, which pod-to-Service traffic depends on.
SYSCTLS = (
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/forwarding",
    "net/ipv4/conf/default/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv6/conf/all/forwarding",
    "net/ipv6/conf/default/forwarding",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/bridge/bridge-nf-call-arptables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
    "net/netfilter/nf_conntrack_udp_timeout",
    "net/netfilter/nf_conntrack_udp_timeout_stream",
)

# kube-proxy's netfilter accounting objects (metrics of packets its rules drop or accept); they outlive it.
NFACCT_OBJECTS = ("ct_state_invalid_dropped_pkts", "localhost_nps_accepted_pkts")
# Chains the node's components create: kubelet and kube-proxy (KUBE-), CNI plugins (CNI-), node.sh itself.
CHAIN_PREFIXES = ("KUBE-", "CNI-", "TRAINGUARD-NODE-")
FAMILIES = {"ipv4": "iptables", "ipv6": "ip6tables"}
NFT_FAMILY = {"ipv4": "ip", "ipv6": "ip6"}
BUILTIN_CHAINS = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


# ---------------------------------------------------------------------------------------------------------------
# iptables-save text: parsing and the plan that undoes the node's chains (pure)


@dataclass
class Table:
    chains: dict[str, str] = field(default_factory=dict)  # name -> policy ("-" for a user chain)
    rules: list[str] = field(default_factory=list)  # "-A CHAIN ..." lines as iptables-save prints them


def parse_save(text: str) -> dict[str, Table]:
    """``iptables-save`` output as ``{table: Table}`` (comments and counters dropped)."""
    tables: dict[str, Table] = {}
    current: Table | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            current = tables.setdefault(line[1:], Table())
        elif line == "COMMIT":
            current = None
        elif current is None:
            raise ValueError(f"iptables-save line outside a table: {line!r}")
        elif line.startswith(":"):
            name, policy = line[1:].split()[:2]
            current.chains[name] = policy
        elif line.startswith("-A "):
            current.rules.append(re.sub(r"^\[\d+:\d+\] ", "", line))
        else:
            raise ValueError(f"unexpected iptables-save line: {line!r}")
    return tables


def normalized_save(text: str) -> str:
    """iptables-save output without comments and packet counters: equal texts mean equal rule sets."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if line.startswith(":"):
            line = re.sub(r" \[\d+:\d+\]$", " [0:0]", line)
        out.append(line)
    return "\n".join(out)


def rule_target(rule: str) -> str | None:
    words = shlex.split(rule)
    for flag in ("-j", "-g", "--jump", "--goto"):
        if flag in words:
            i = words.index(flag)
            if i + 1 < len(words):
                return words[i + 1]
    return None


def ours(chain: str) -> bool:
    return chain.startswith(CHAIN_PREFIXES)


def undo_script(before: dict[str, Table], now: dict[str, Table]) -> str:
    """An ``iptables-restore --noflush`` script that removes the node's chains created since ``before``: first
    every rule of an older chain that jumps to one, then all of them emptied, then deleted (chains refer to each
    other, so nothing is deleted until all are empty). Empty when there is nothing to undo."""
    out: list[str] = []
    for name, table in sorted(now.items()):
        old = before.get(name, Table())
        new_chains = sorted(c for c in table.chains if c not in old.chains and ours(c))
        if not new_chains:
            continue
        new = set(new_chains)
        lines = [f"*{name}"]
        for rule in table.rules:
            chain = rule.split()[1]
            if chain not in new and rule_target(rule) in new:
                lines.append("-D " + rule[3:])
        lines += [f"-F {c}" for c in new_chains]
        lines += [f"-X {c}" for c in new_chains]
        lines.append("COMMIT")
        out += lines
    return "\n".join(out) + ("\n" if out else "")


def empty_table(table: Table) -> bool:
    """Only built-in chains, each with policy ACCEPT, and no rule: the same as no table at all."""
    return not table.rules and all(c in BUILTIN_CHAINS and p == "ACCEPT" for c, p in table.chains.items())


# ---------------------------------------------------------------------------------------------------------------
# mounts (pure)


def unescape_mount(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mount_points(mountinfo: str) -> list[str]:
    return [unescape_mount(line.split()[4]) for line in mountinfo.splitlines() if line.strip()]


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def mounts_to_undo(before: list[str], now: list[str], roots: list[str]) -> list[str]:
    """New mount points under ``roots``, deepest first, each as often as it is stacked."""
    remaining = list(before)
    new: list[str] = []
    for mp in now:
        if mp in remaining:
            remaining.remove(mp)
        elif under(mp, roots):
            new.append(mp)
    return sorted(new, key=lambda p: (p.count("/"), p), reverse=True)


# ---------------------------------------------------------------------------------------------------------------
# reading the host


def read_sysctls() -> dict[str, str]:
    values = {}
    for key in SYSCTLS:
        try:
            values[key] = Path("/proc/sys", key).read_text().strip()
        except OSError:
            pass  # not on this kernel, or the module is not loaded: nothing the node can change either
    return values


def iptables_save(family: str) -> str | None:
    tool = FAMILIES[family] + "-save"
    if not shutil.which(tool):
        return None
    return subprocess.run([tool], check=True, capture_output=True, text=True).stdout


def nft_tables() -> list[str] | None:
    if not shutil.which("nft"):
        return None
    out = subprocess.run(["nft", "list", "tables"], check=True, capture_output=True, text=True).stdout
    return sorted(line.removeprefix("table ").strip() for line in out.splitlines() if line.startswith("table "))


def nfacct_objects() -> list[str] | None:
    """Names of the netfilter accounting objects (kube-proxy counts dropped packets in two of its own)."""
    if not shutil.which("nfacct"):
        return None
    out = subprocess.run(["nfacct", "list"], check=True, capture_output=True, text=True).stdout
    return sorted(m.group(1) for m in re.finditer(r"= (\S+);", out))


def cgroup_hierarchies() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2"):
            out.append(unescape_mount(fields[4]))
    return sorted(out)


def cgroup_tops() -> dict[str, list[str]]:
    return {h: sorted(e.name for e in os.scandir(h) if e.is_dir(follow_symlinks=False)) for h in cgroup_hierarchies()}


def links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True, text=True).stdout
    return sorted(line.split(": ")[1].split("@")[0] for line in out.splitlines())


def snapshot(paths: list[str]) -> dict:
    return {
        "sysctls": read_sysctls(),
        "iptables": {f: iptables_save(f) for f in FAMILIES},
        "nft_tables": nft_tables(),
        "nfacct": nfacct_objects(),
        "mounts": mount_points(Path("/proc/self/mountinfo").read_text()),
        "links": links(),
        "cgroups": cgroup_tops(),
        "paths": {p: os.path.lexists(p) for p in paths},
    }


# ---------------------------------------------------------------------------------------------------------------
# commands


@dataclass
class Config:
    """What node.sh tells us it owns: its own directories (removed whole), other paths it writes to, the names it
    gives interfaces and its cgroup root, and the name of its CNI network."""

    owned: list[str]
    touched: list[str]
    link_names: list[str]
    cgroup_names: list[str]
    cni_network: str
    pod_logs: str

    @staticmethod
    def load(record: Path) -> "Config":
        return Config(**json.loads((record / "config.json").read_text()))


def record(args: argparse.Namespace) -> int:
    rec = Path(args.record_dir)
    if (rec / "before.json").exists():
        print(f"node-host: {rec} already holds a record; a node is up (or a 'down' did not finish)", file=sys.stderr)
        return 1
    cfg = Config(owned=args.owned, touched=args.touched, link_names=args.link, cgroup_names=args.cgroup,
                 cni_network=args.cni_network, pod_logs=args.pod_logs)
    # the host as it is, before the record's own directory exists
    state = snapshot(cfg.owned + cfg.touched)
    state["time"] = time.time()
    rec.mkdir(parents=True, exist_ok=True)
    (rec / "config.json").write_text(json.dumps(cfg.__dict__, indent=1))
    tmp = rec / "before.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    tmp.rename(rec / "before.json")
    return 0


def run(cmd: list[str], problems: list[str], stdin: str | None = None) -> bool:
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if p.returncode:
        problems.append(f"{' '.join(cmd)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.returncode == 0


def restore_mounts(before: dict, cfg: Config, problems: list[str], log) -> None:
    now = mount_points(Path("/proc/self/mountinfo").read_text())
    for mp in mounts_to_undo(before["mounts"], now, cfg.owned + cfg.touched):
        if subprocess.run(["umount", mp], capture_output=True).returncode:
            # busy: detach it now, the kernel frees it when its last user is gone
            if run(["umount", "-l", mp], problems):
                log(f"unmounted {mp} (lazily: it was busy)")
        else:
            log(f"unmounted {mp}")


def restore_links(before: dict, cfg: Config, problems: list[str], log) -> None:
    out = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True, text=True).stdout
    ports = []
    for line in out.splitlines():
        name = line.split(": ")[1].split("@")[0]
        m = re.search(r" master (\S+)", line)
        if name not in before["links"] and m and m.group(1) in cfg.link_names:
            ports.append(name)
    for name in ports + [n for n in cfg.link_names if n in links() and n not in before["links"]]:
        if name in links() and run(["ip", "link", "delete", name], problems):
            log(f"deleted interface {name}")


def restore_iptables(before: dict, problems: list[str], log) -> None:
    for family, tool in FAMILIES.items():
        if before["iptables"].get(family) is None or not shutil.which(tool + "-restore"):
            continue
        old = parse_save(before["iptables"][family])
        now = parse_save(iptables_save(family) or "")
        script = undo_script(old, now)
        if script and run([tool + "-restore", "--noflush"], problems, stdin=script):
            chains = [ln[3:] for ln in script.splitlines() if ln.startswith("-X ")]
            log(f"{tool}: deleted {len(chains)} chain(s) and the jumps to them")
        # iptables-nft leaves behind the tables it created for them; delete those that are empty again
        if before.get("nft_tables") is None or nft_tables() is None:
            continue
        now = parse_save(iptables_save(family) or "")
        for name, table in sorted(now.items()):
            nft_name = f"{NFT_FAMILY[family]} {name}"
            if nft_name in before["nft_tables"] or nft_name not in (nft_tables() or []) or not empty_table(table):
                continue
            if run(["nft", "delete", "table", NFT_FAMILY[family], name], problems):
                log(f"nft: deleted the empty table {nft_name} that did not exist before")


def restore_nfacct(before: dict, problems: list[str], log) -> None:
    """After the iptables rules that count into them are gone (the kernel refuses to delete one in use)."""
    if before.get("nfacct") is None:
        return
    for name in sorted(set(nfacct_objects() or []) - set(before["nfacct"])):
        if name not in NFACCT_OBJECTS:
            continue
        # the rules that used it may still be releasing it a moment after they are gone (EBUSY)
        for _ in range(50):
            if subprocess.run(["nfacct", "delete", name], capture_output=True).returncode == 0:
                log(f"nfacct: deleted {name}")
                break
            time.sleep(0.1)
        else:
            run(["nfacct", "delete", name], problems)


def restore_sysctls(before: dict, problems: list[str], log) -> None:
    now = read_sysctls()
    for key, value in before["sysctls"].items():
        if now.get(key, value) != value:
            try:
                Path("/proc/sys", key).write_text(value + "\n")
                log(f"sysctl {key.replace('/', '.')}: {now[key]} -> {value}")
            except OSError as e:
                problems.append(f"sysctl {key}: {e}")


def restore_cgroups(before: dict, cfg: Config, problems: list[str], log) -> None:
    for hierarchy, tops in cgroup_tops().items():
        for name in tops:
            if name in before["cgroups"].get(hierarchy, []) or name not in cfg.cgroup_names:
                continue
            root = Path(hierarchy, name)
            dirs = sorted((Path(d) for d, _, _ in os.walk(root)), key=lambda p: len(p.parts), reverse=True)
            for d in dirs:
                try:
                    d.rmdir()
                except OSError as e:
                    problems.append(f"cgroup {d}: {e}")
            if not root.exists():
                log(f"removed cgroup {root} ({len(dirs)} dir(s))")


def holds(path: str, record: Path) -> bool:
    """``path`` is, or contains, the record directory (removed only once everything else is back)."""
    return under(str(record), [path])


def remove(p: str, problems: list[str], log) -> None:
    try:
        shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        log(f"removed {p}")
    except OSError as e:
        problems.append(f"remove {p}: {e}")


def restore_paths(before: dict, cfg: Config, record: Path, problems: list[str], log) -> None:
    existed = before["paths"]
    for p in cfg.touched + cfg.owned:
        if not os.path.lexists(p):
            continue
        if not existed.get(p, True):
            if not holds(p, record):
                remove(p, problems, log)
                continue
            # everything but the way to the record
            keep = Path(p)
            for part in record.relative_to(p).parts:
                for entry in os.scandir(keep):
                    if entry.name != part:
                        remove(entry.path, problems, lambda _msg: None)
                keep = keep / part
            continue
        # A directory that was there before: only the node's own entries go (kubelet's log symlinks into the
        # node's pod log directory, the CNI result cache of the node's network).
        for entry in list(os.scandir(p)) if os.path.isdir(p) else []:
            if entry.is_symlink() and os.readlink(entry.path).startswith(cfg.pod_logs.rstrip("/") + "/"):
                os.unlink(entry.path)
        results = Path(p, "results")
        if results.is_dir():
            for entry in results.iterdir():
                if entry.name.startswith(cfg.cni_network + "-"):
                    entry.unlink()


def undo(args: argparse.Namespace) -> int:
    """Put back what the record holds, check nothing else differs, and only then remove the record (so a failed
    ``down`` can be run again)."""
    rec = Path(args.record_dir).resolve()
    before = json.loads((rec / "before.json").read_text())
    cfg = Config.load(rec)
    problems: list[str] = []

    def log(msg: str) -> None:
        print(f"node-host: {msg}", file=sys.stderr)

    # Mounts first (a mounted network namespace keeps its veth alive), then what hangs off them. Each step runs
    # whatever the one before it could not do.
    steps = [
        ("mounts", lambda: restore_mounts(before, cfg, problems, log)),
        ("interfaces", lambda: restore_links(before, cfg, problems, log)),
        ("iptables", lambda: restore_iptables(before, problems, log)),
        ("nfacct", lambda: restore_nfacct(before, problems, log)),
        ("sysctls", lambda: restore_sysctls(before, problems, log)),
        ("cgroups", lambda: restore_cgroups(before, cfg, problems, log)),
        ("paths", lambda: restore_paths(before, cfg, rec, problems, log)),
    ]
    took = {}
    for name, step in steps:
        t0 = time.monotonic()
        try:
            step()
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            problems.append(f"{name}: {e}")
        took[name] = time.monotonic() - t0
    log("restored in " + ", ".join(f"{n} {t:.1f} s" for n, t in took.items()))
    for p in problems:
        log(f"could not restore: {p}")
    last = [p for p in cfg.owned + cfg.touched if not before["paths"].get(p, True) and holds(p, rec)]
    now = snapshot(list(before["paths"]))
    for p in last:
        now["paths"][p] = False  # removed below, once the rest is known to be back
    found = differences(before, now, cfg)
    for line in found:
        log(f"still differs from before 'up': {line}")
    if problems or found:
        log(f"the record stays in {rec}: fix the above by hand, or run 'hack/node.sh down' again")
        return 1
    for p in last:
        remove(p, problems, log)
    return 1 if problems else 0


def differences(before: dict, now: dict, cfg: Config | None = None) -> list[str]:
    """What differs between two snapshots, one line each (an empty table counts as no table). With ``cfg``, mounts
    and cgroups only where the node makes them: other programs on the machine mount and make cgroups meanwhile."""
    out = []
    for key, value in before["sysctls"].items():
        if now["sysctls"].get(key) != value:
            out.append(f"sysctl {key.replace('/', '.')}: was {value}, is {now['sysctls'].get(key)}")
    for family in FAMILIES:
        a, b = before["iptables"].get(family), now["iptables"].get(family)
        if a is None or b is None:
            continue
        ta, tb = parse_save(a), parse_save(b)
        for name in sorted(set(ta) | set(tb)):
            x, y = ta.get(name, Table()), tb.get(name, Table())
            if empty_table(x) and empty_table(y):
                continue
            for c in sorted(set(y.chains) - set(x.chains)):
                out.append(f"{FAMILIES[family]} -t {name}: chain {c} is new")
            for c in sorted(set(x.chains) - set(y.chains)):
                out.append(f"{FAMILIES[family]} -t {name}: chain {c} is gone")
            for r in [r for r in y.rules if r not in x.rules]:
                out.append(f"{FAMILIES[family]} -t {name}: rule is new: {r}")
            for r in [r for r in x.rules if r not in y.rules]:
                out.append(f"{FAMILIES[family]} -t {name}: rule is gone: {r}")
    if before.get("nft_tables") is not None and now.get("nft_tables") is not None:
        for t in sorted(set(now["nft_tables"]) - set(before["nft_tables"])):
            out.append(f"nft table {t} is new")
    if before.get("nfacct") is not None and now.get("nfacct") is not None:
        for name in sorted(set(now["nfacct"]) ^ set(before["nfacct"])):
            out.append(f"nfacct object {name} is {'new' if name in now['nfacct'] else 'gone'}")
    roots = cfg.owned + cfg.touched if cfg else ["/"]
    for mp in sorted(set(now["mounts"]) - set(before["mounts"])):
        if under(mp, roots):
            out.append(f"mount {mp} is new")
    for mp in sorted(set(before["mounts"]) - set(now["mounts"])):
        if under(mp, roots):
            out.append(f"mount {mp} is gone")
    for name in sorted(set(now["links"]) ^ set(before["links"])):
        out.append(f"interface {name} is {'new' if name in now['links'] else 'gone'}")
    for h, tops in now["cgroups"].items():
        for name in sorted(set(tops) ^ set(before["cgroups"].get(h, []))):
            if cfg and name not in cfg.cgroup_names:
                continue
            out.append(f"cgroup {h}/{name} is {'new' if name in tops else 'gone'}")
    for p, existed in before["paths"].items():
        if now["paths"].get(p) != existed:
            out.append(f"{p} {'exists' if now['paths'].get(p) else 'is gone'} (it did {'' if existed else 'not '}exist)")
    return out


def diff(args: argparse.Namespace) -> int:
    rec = Path(args.record_dir)
    before = json.loads((rec / "before.json").read_text())
    now = snapshot(list(before["paths"]))
    found = differences(before, now, Config.load(rec))
    for line in found:
        print(f"node-host: still differs from before 'up': {line}", file=sys.stderr)
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="node_host.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="write down the host settings before a node changes them")
    r.add_argument("record_dir")
    r.add_argument("--owned", action="append", default=[], help="a directory the node creates and removes whole")
    r.add_argument("--touched", action="append", default=[], help="a path the node writes that it cannot relocate")
    r.add_argument("--link", action="append", default=[], help="an interface name the node creates")
    r.add_argument("--cgroup", action="append", default=[], help="a top-level cgroup name the node creates")
    r.add_argument("--cni-network", required=True)
    r.add_argument("--pod-logs", required=True)
    for name, helptext in (("undo", "put back what the record holds, then remove it"),
                           ("diff", "name what differs from the record now")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("record_dir")
    args = ap.parse_args(argv)
    return {"record": record, "undo": undo, "diff": diff}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
