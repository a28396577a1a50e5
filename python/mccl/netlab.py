"""An emulated switched-Ethernet fleet on one Linux machine.

Each host is a network namespace with one interface, ``eth0``, joined to a
Linux bridge (the switch) by a veth pair. Both directions of every host's
link are shaped with ``tc tbf`` (the uplink on ``eth0``, the downlink on the
switch port), so a host sends and receives at most ``rate``, as on a switched
1 or 10 GbE network. Addresses come from the benchmarking range
198.18.0.0/15 (RFC 2544). Needs root, iproute2 and, for ``goodput``, iperf3.

    from mccl.netlab import Lab
    lab = Lab.up(4, rate="1gbit")
    lab.run(0, ["ping", "-c1", lab.hosts[1].address])
    lab.set_rate(2, "100mbit")      # one slow host
    lab.cut(3); lab.restore(3)      # pull and replug a cable
    lab.down()

The lab's description is kept in a state file (``/run/mccl-netlab-NAME.json``)
so that separate commands (``mccl netlab up``, ``run``, ``down``) share it;
``down`` also removes whatever a crashed ``up`` left behind. Delay and loss
need the kernel's ``sch_netem``; where it exists ``up --delay/--loss`` puts a
netem qdisc under the tbf, elsewhere it says so.

TCP autocorking is turned off in the hosts' namespaces (``up --autocorking``
keeps the kernel's default). Autocorking holds a short tail segment until the
previous one has left the sender; on a physical NIC that is microseconds, but
a veth's skb is only freed once the receiving socket has read it, behind two
tbf queues, so tails waited up to the peer's delayed-ACK timer (~40 ms):
64 KiB all-reduces on 8 lab hosts took 7-13 ms instead of 1.6 ms.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

SUBNET = "198.18.0"  # hosts are 198.18.0.1 .. 198.18.0.N (/24)
MAX_HOSTS = 200


NEIGH = "/proc/sys/net/ipv4/neigh/default/gc_thresh{}"


def _neighbour_room(n: int) -> None:
    """Makes the kernel's ARP table hold a full mesh of n hosts. The table
    and its limits are shared by every network namespace, and a full mesh
    needs n(n-1) entries: past gc_thresh3 (1024 by default, so beyond 32
    hosts) new neighbours fail with "No route to host". Raises the three
    thresholds (never lowers them); they are host-wide settings."""
    need = n * (n - 1) + 256
    want = {1: need, 2: 2 * need, 3: 4 * need}
    for k in (3, 2, 1):  # thresh3 first: the kernel keeps 1 <= 2 <= 3
        try:
            with open(NEIGH.format(k)) as f:
                have = int(f.read().split()[0])
            if have < want[k]:
                with open(NEIGH.format(k), "w") as f:
                    f.write(str(want[k]))
        except (OSError, ValueError) as e:
            if need > 1024:
                raise LabError(f"a {n}-host lab needs the ARP table's gc_thresh{k} at {want[k]} or more "
                               f"({NEIGH.format(k)}): {e}") from None


def _allow_congestion(name: str, proc: str = "/proc/sys/net/ipv4") -> None:
    """Lets the lab's namespaces choose TCP congestion control `name`: a
    namespace may pick only from net.ipv4.tcp_allowed_congestion_control,
    which some images keep to their own default (the H200 box: "reno bbr",
    with cubic available). Adds `name` to it when the kernel has it (a
    host-wide setting, only ever added to); refuses a name the kernel does
    not offer, listing those it does."""
    base = Path(proc)
    available = (base / "tcp_available_congestion_control").read_text().split()
    if name not in available and shutil.which("modprobe"):
        # Listed only once loaded: a kernel may build it as module tcp_NAME.
        subprocess.run(["modprobe", f"tcp_{name}"], capture_output=True)
        available = (base / "tcp_available_congestion_control").read_text().split()
    if name not in available:
        raise LabError(f"congestion control {name!r} is not available in this kernel: neither in "
                       f"net.ipv4.tcp_available_congestion_control ({' '.join(available)}) nor "
                       f"loadable as module tcp_{name}")
    allowed_file = base / "tcp_allowed_congestion_control"
    allowed = allowed_file.read_text().split()
    if name in allowed:
        return
    try:
        allowed_file.write_text(" ".join(allowed + [name]) + "\n")
    except OSError as e:
        raise LabError(f"congestion control {name!r} is not in net.ipv4.tcp_allowed_congestion_control "
                       f"({' '.join(allowed)}) and adding it failed: {e}") from None


class LabError(RuntimeError):
    """A lab operation failed; the message says which command and why."""


@dataclass
class Host:
    index: int
    netns: str
    port: str  # the switch-side veth (root namespace)
    address: str
    rate: str
    up: bool = True


@dataclass
class Lab:
    name: str
    rate: str
    hosts: list[Host] = field(default_factory=list)
    bridge: str = ""
    delay: str = ""
    loss: str = ""
    autocorking: bool = False  # the kernel's default is on; see the module doc
    # The hosts' TCP congestion control (their namespaces' default, or
    # `up(congestion=...)`): ring collectives keep one long flow per link, and
    # BBR's periodic RTT probing stalls a ring round (docs/benchmarks.md).
    congestion: str = ""
    goodput: dict = field(default_factory=dict)  # filled by measure_goodput()

    # ------------------------------------------------------------------ setup
    @staticmethod
    def requirements(goodput: bool = False) -> list[str]:
        """What is missing to run a lab here (empty when it can run)."""
        missing = []
        if os.name != "posix" or not Path("/proc/self/ns/net").exists():
            return ["Linux network namespaces (this is not Linux)"]
        if os.geteuid() != 0:
            missing.append("root (network namespaces and tc need CAP_NET_ADMIN)")
        for tool in ("ip", "tc") + (("iperf3",) if goodput else ()):
            if not shutil.which(tool):
                missing.append(f"the '{tool}' command (Debian: apt-get install "
                               f"{'iperf3' if tool == 'iperf3' else 'iproute2'})")
        if not missing:
            # Root is not always enough (containers without CAP_NET_ADMIN): try.
            probe = f"mcclprobe{os.getpid()}"
            p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
            if p.returncode != 0:
                missing.append(f"permission to create network namespaces ({p.stderr.strip()})")
            else:
                subprocess.run(["ip", "netns", "del", probe], capture_output=True)
        return missing

    @classmethod
    def up(cls, n: int, rate: str = "1gbit", name: str = "mccl", delay: str = "",
           loss: str = "", autocorking: bool = False, congestion: str = "") -> "Lab":
        """Creates an n-host lab (tearing down an older one of this name);
        `congestion` sets the hosts' TCP congestion control (default: the
        kernel's), adding it to the host's allowed list if need be."""
        missing = cls.requirements()
        if missing:
            raise LabError("netlab needs " + " and ".join(missing))
        if not 1 <= n <= MAX_HOSTS:
            raise LabError(f"a lab has 1 to {MAX_HOSTS} hosts, not {n}")
        if not name.isalnum() or len(name) > 8:
            raise LabError(f"lab name {name!r} must be 1-8 letters or digits (interface names are short)")
        if congestion and not (congestion.isascii() and congestion.replace("_", "").isalnum() and len(congestion) < 16):
            raise LabError(f"congestion control {congestion!r} is not a name (letters, digits and _)")
        if congestion:
            _allow_congestion(congestion)
        _cleanup(name)
        _neighbour_room(n)
        lab = cls(name=name, rate=rate, bridge=f"{name}-br", delay=delay, loss=loss,
                  autocorking=autocorking)
        try:
            _sh(["ip", "link", "add", lab.bridge, "type", "bridge"])
            _sh(["ip", "link", "set", lab.bridge, "up"])
            for i in range(n):
                h = Host(index=i, netns=f"{name}-h{i}", port=f"{name}-v{i}",
                         address=f"{SUBNET}.{i + 1}", rate=rate)
                _sh(["ip", "netns", "add", h.netns])
                _sh(["ip", "link", "add", h.port, "type", "veth", "peer", "name", "eth0",
                     "netns", h.netns])
                _sh(["ip", "link", "set", h.port, "master", lab.bridge])
                _sh(["ip", "link", "set", h.port, "up"])
                ns = ["ip", "netns", "exec", h.netns]
                _sh(ns + ["ip", "addr", "add", f"{h.address}/24", "dev", "eth0"])
                _sh(ns + ["ip", "link", "set", "eth0", "up"])
                _sh(ns + ["ip", "link", "set", "lo", "up"])
                # (per namespace; a kernel without the knob has no autocorking)
                _sh(ns + ["sh", "-c", f"f=/proc/sys/net/ipv4/tcp_autocorking; "
                                      f"[ ! -e $f ] || echo {int(autocorking)} > $f"])
                cc = "/proc/sys/net/ipv4/tcp_congestion_control"
                if congestion:
                    p = subprocess.run(ns + ["sh", "-c", 'echo "$1" > "$2"', "sh", congestion, cc],
                                       capture_output=True, text=True)
                    if p.returncode != 0:
                        allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().strip()
                        raise LabError(f"congestion control {congestion!r} refused in {h.netns} "
                                       f"({p.stderr.strip()}); a namespace may choose only from "
                                       f"net.ipv4.tcp_allowed_congestion_control ({allowed})")
                got = subprocess.run(ns + ["cat", cc], capture_output=True, text=True).stdout.strip()
                if i == 0:
                    lab.congestion = got
                elif got != lab.congestion:
                    raise LabError(f"{h.netns} runs TCP congestion control {got}, h0 {lab.congestion}")
                lab.hosts.append(h)
                lab._shape(h)
            lab.save()
        except BaseException:
            _cleanup(name)
            raise
        return lab

    def _shape(self, h: Host) -> None:
        """tbf at `h.rate` on both ends of the host's link (netem under it if asked)."""
        burst = _burst(h.rate)
        for dev, prefix in ((h.port, []), ("eth0", ["ip", "netns", "exec", h.netns])):
            _sh(prefix + ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
            if self.delay or self.loss:
                netem = ["netem"] + (["delay", self.delay] if self.delay else []) + \
                        (["loss", self.loss] if self.loss else [])
                try:
                    _sh(prefix + ["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", *netem])
                except LabError as e:
                    raise LabError("delay/loss need the kernel's netem qdisc (sch_netem), which "
                                   f"this kernel does not offer: {e}") from None
                parent = ["parent", "1:", "handle", "2:"]
            else:
                parent = ["root"]
            _sh(prefix + ["tc", "qdisc", "add", "dev", dev, *parent, "tbf", "rate", h.rate,
                          "burst", burst, "latency", "20ms"])

    # ----------------------------------------------------------------- state
    @staticmethod
    def state_path(name: str = "mccl") -> Path:
        base = os.environ.get("MCCL_NETLAB_STATE_DIR", "/run")
        return Path(base) / f"mccl-netlab-{name}.json"

    def save(self) -> None:
        path = self.state_path(self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, name: str = "mccl") -> "Lab":
        path = cls.state_path(name)
        if not path.exists():
            raise LabError(f"no lab named {name!r} is up (no {path}); start one with: mccl netlab up N")
        d = json.loads(path.read_text())
        d["hosts"] = [Host(**h) for h in d["hosts"]]
        return cls(**d)

    # ------------------------------------------------------------ operations
    def host(self, h: int | str) -> Host:
        if isinstance(h, str):
            for x in self.hosts:
                if h in (x.netns, x.address, f"h{x.index}", str(x.index)):
                    return x
            raise LabError(f"no host {h!r} in lab {self.name!r} (hosts h0..h{len(self.hosts) - 1})")
        if not 0 <= h < len(self.hosts):
            raise LabError(f"no host {h} in lab {self.name!r} (hosts 0..{len(self.hosts) - 1})")
        return self.hosts[h]

    def set_rate(self, h: int | str, rate: str) -> None:
        """Shapes one host's link (both directions) to `rate`."""
        host = self.host(h)
        host.rate = rate
        self._shape(host)
        self.save()

    def cut(self, h: int | str) -> None:
        """Unplugs a host's cable: its switch port goes down, packets vanish."""
        host = self.host(h)
        _sh(["ip", "link", "set", host.port, "down"])
        host.up = False
        self.save()

    def restore(self, h: int | str) -> None:
        host = self.host(h)
        _sh(["ip", "link", "set", host.port, "up"])
        host.up = True
        self.save()

    def prefix(self, h: int | str) -> list[str]:
        """argv prefix that runs a command on host h."""
        return ["ip", "netns", "exec", self.host(h).netns]

    def launch_options(self, nproc: int) -> dict:
        """mccl.launch.run() options that put rank r of an `nproc`-rank job on host r."""
        if nproc > len(self.hosts):
            raise LabError(f"{nproc} ranks but lab {self.name!r} has {len(self.hosts)} hosts")
        return {"wrap": self.prefix, "rank_env": self.rank_env}

    def rank_env(self, rank: int) -> dict[str, str]:
        """Environment for rank `rank` of a job whose rank r runs on host r."""
        return {"MASTER_ADDR": self.hosts[0].address, "MCCL_SOCKET_IFNAME": "=eth0",
                "GLOO_SOCKET_IFNAME": "eth0"}

    def attach_driver(self, address: str = f"{SUBNET}.254") -> str:
        """Gives this machine's own namespace an address on the lab's switch
        (the bridge), so that a test's driver (a browser, a script) reaches
        the hosts as one more machine on the switch would; its traffic is
        not shaped. Idempotent; the address goes with the lab."""
        if address.rsplit(".", 1)[0] != SUBNET or int(address.rsplit(".", 1)[1]) <= len(self.hosts):
            raise LabError(f"driver address {address} must be in {SUBNET}.0/24 above the hosts' addresses")
        have = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", self.bridge], capture_output=True,
                              text=True).stdout
        if f" {address}/" not in have:
            _sh(["ip", "addr", "add", f"{address}/24", "dev", self.bridge])
        return address

    def run(self, h: int | str, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.prefix(h) + list(cmd), **kw)

    def popen(self, h: int | str, cmd: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.prefix(h) + list(cmd), **kw)

    def measure_goodput(self, streams: int = 4, seconds: float = 5.0, port: int = 5201) -> dict:
        """iperf3 between every ring neighbour pair at once (host i -> i+1),
        as a ring all-reduce loads the links. Returns (and saves) per-link
        goodput in GB/s, their minimum (the ring's ceiling) and median."""
        missing = self.requirements(goodput=True)
        if missing:
            raise LabError("goodput needs " + " and ".join(missing))
        n = len(self.hosts)
        if n < 2:
            raise LabError("goodput needs at least 2 hosts")
        servers = [self.popen(h.index, ["iperf3", "-s", "-1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for h in self.hosts]
        try:
            for h in self.hosts:
                _wait_port(self, h.index, port)
            clients = []
            for h in self.hosts:
                dst = self.hosts[(h.index + 1) % n]
                clients.append(self.popen(h.index, ["iperf3", "-c", dst.address, "-p", str(port), "-P",
                                                    str(streams), "-t", str(seconds), "-J"],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            links = {}
            for h, c in zip(self.hosts, clients):
                out, err = c.communicate(timeout=seconds + 30)
                if c.returncode != 0:
                    raise LabError(f"iperf3 from h{h.index} failed: {(err or out)[-500:]}")
                bps = json.loads(out)["end"]["sum_received"]["bits_per_second"]
                links[f"h{h.index}->h{(h.index + 1) % n}"] = bps / 8 / 1e9
        finally:
            for s in servers:
                s.kill()
                s.wait()
        vals = sorted(links.values())
        self.goodput = {"links_GBps": links, "min_GBps": vals[0], "median_GBps": vals[len(vals) // 2],
                        "streams": streams, "seconds": seconds, "rate": self.rate,
                        "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
        self.save()
        return self.goodput

    def down(self) -> None:
        _cleanup(self.name)

    def describe(self) -> str:
        lines = [f"lab {self.name!r}: {len(self.hosts)} hosts on bridge {self.bridge}, "
                 f"{self.rate} per link (tbf, both directions), TCP autocorking "
                 f"{'on' if self.autocorking else 'off'}"
                 + (f", TCP congestion control {self.congestion}" if self.congestion else "")]
        for h in self.hosts:
            state = "" if h.up else "  CUT"
            lines.append(f"  h{h.index}  {h.address:<14} netns {h.netns:<12} {h.rate}{state}")
        if self.goodput:
            lines.append(f"  ring goodput (iperf3 x{self.goodput['streams']}, all links at once): "
                         f"min {self.goodput['min_GBps'] * 8:.3f} Gbit/s, "
                         f"median {self.goodput['median_GBps'] * 8:.3f} Gbit/s")
        return "\n".join(lines)


def lab_for(name: str, nproc: int, tool: str) -> tuple[Lab, dict]:
    """Lab `name` and the launch options (mccl.launch.run) that put `nproc`
    ranks on its hosts; exits with "`tool`: why" when it cannot."""
    try:
        lab = Lab.load(name)
        return lab, lab.launch_options(nproc)
    except LabError as e:
        raise SystemExit(f"{tool}: {e}") from None


def down(name: str = "mccl") -> None:
    """Removes a lab (and any remains of a failed one) by name."""
    _cleanup(name)


# --------------------------------------------------------------------- helpers

def _sh(cmd: list[str], check: bool = True) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: {(p.stderr or p.stdout).strip()}")
    return p.stdout


def _burst(rate: str) -> str:
    """tbf bucket: 2 ms at the rate, at least 64 KiB (a GSO segment)."""
    bits = _rate_bits(rate)
    return f"{max(64 * 1024, int(bits / 8 * 0.002))}b"


def _rate_bits(rate: str) -> float:
    r = rate.strip().lower()
    units = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
    for suffix, mult in units:
        if r.endswith(suffix):
            return float(r[: -len(suffix)]) * mult
    raise LabError(f"rate {rate!r}: use e.g. 1gbit, 100mbit, 500kbit")


def _wait_port(lab: Lab, h: int, port: int, timeout: float = 10.0) -> None:
    host = lab.host(h)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = lab.run(h, ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise LabError(f"iperf3 server on {host.netns} did not start listening on port {port}")


def _cleanup(name: str) -> None:
    """Deletes every namespace and interface of lab `name`; never raises."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        ns = line.split()[0] if line.split() else ""
        if ns.startswith(f"{name}-h") and ns[len(name) + 2:].isdigit():
            # Kill what still runs there, then the namespace (its veth ends go with it).
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        dev = parts[1].strip().split("@")[0]
        if dev == f"{name}-br" or (dev.startswith(f"{name}-v") and dev[len(name) + 2:].isdigit()):
            subprocess.run(["ip", "link", "del", dev], capture_output=True)
    try:
        Lab.state_path(name).unlink()
    except FileNotFoundError:
        pass
