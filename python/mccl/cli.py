"""The ``mccl`` command: network lab and fleet diagnostics.

    mccl netlab up 4 --rate 1gbit     # 4 hosts in network namespaces on one switch
    mccl netlab status
    mccl netlab goodput               # iperf3 on every ring link at once
    mccl netlab rate h2 100mbit       # make one host slow
    mccl netlab cut h3 / restore h3   # pull / replug a cable
    mccl netlab run h0 -- ip addr     # a command on a host
    mccl netlab down
    mccl doctor --nproc 4             # local ranks
    mccl doctor --netlab mccl         # one rank per lab host
    torchrun ... -m mccl.cli doctor   # across machines (each process is a rank)
    mccl plan --scaling s.json --nodes 24,100,200 --price 1.5 --local-tflops 14 --ref-tflops 19.5
    mccl elastic serve --port 29400   # the job's store, on the machine that stays on
    mccl elastic status --store host:29400 --job vit
    mccl elastic status --http http://host:29480       # every job and machine, from the status page
    mccl elastic create --store host:29400 --job vit   # then start the fleet's workers
    mccl agent install --config fleet.toml   # on every Mac: lend it while its person is away
    mccl agent check --config fleet.toml     # what the agent would do now, and why
    mccl --version                    # this mccl, and the torch it was built for
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _netlab(a) -> int:
    from .netlab import Lab, LabError, down

    try:
        if a.action == "up":
            lab = Lab.up(a.hosts, rate=a.rate, name=a.name, delay=a.delay, loss=a.loss,
                         autocorking=a.autocorking, congestion=a.congestion)
            print(lab.describe())
        elif a.action == "down":
            down(a.name)
            print(f"lab {a.name!r} is down")
        elif a.action == "status":
            lab = Lab.load(a.name)
            print(json.dumps(lab.__dict__, default=lambda o: o.__dict__, indent=1) if a.json else lab.describe())
        elif a.action == "goodput":
            lab = Lab.load(a.name)
            g = lab.measure_goodput(streams=a.streams, seconds=a.seconds)
            if a.json:
                print(json.dumps(g, indent=1))
            else:
                print(f"TCP goodput, iperf3 with {a.streams} streams, every ring link at once ({a.seconds:g} s):")
                for link, v in g["links_GBps"].items():
                    print(f"  {link:<10} {v * 8:.3f} Gbit/s  ({v * 1000:.1f} MB/s)")
                print(f"  ring ceiling (slowest link): {g['min_GBps'] * 8:.3f} Gbit/s; "
                      f"median {g['median_GBps'] * 8:.3f} Gbit/s")
        elif a.action == "rate":
            lab = Lab.load(a.name)
            lab.set_rate(a.host, a.new_rate)
            print(lab.describe())
        elif a.action == "cut":
            Lab.load(a.name).cut(a.host)
            print(f"{a.host}: link cut")
        elif a.action == "restore":
            Lab.load(a.name).restore(a.host)
            print(f"{a.host}: link restored")
        elif a.action == "run":
            cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
            if not cmd:
                print("mccl netlab run: give a command after the host", file=sys.stderr)
                return 2
            return Lab.load(a.name).run(a.host, cmd).returncode
    except LabError as e:
        print(f"mccl netlab: {e}", file=sys.stderr)
        return 1
    return 0


def _doctor(a, argv) -> int:
    from . import doctor

    if doctor.env_has_rank():
        return doctor.main_rank(a)
    from .launch import run_tool

    return run_tool("mccl.cli", argv, a.nproc, timeout=a.timeout, tool="mccl doctor",
                    netlab=a.netlab)


def _plan_network(a) -> tuple[float, float, float | None]:
    """alpha (us), o (us) and beta (ns per byte; None when neither given nor
    in the tune file) for the validations: the flags, else --tune."""
    from . import plan

    net = plan.inputs_from_files(None, a.tune, None, None)
    alpha = a.alpha_us if a.alpha_us is not None else net.get("alpha_us", 50.0)
    over = a.overhead_us if a.overhead_us is not None else net.get("overhead_us", 10.0)
    beta = 8.0 / a.link_gbit if a.link_gbit else net.get("beta_ns_per_byte")
    return alpha, over, beta


def _plan(a) -> int:
    from . import plan

    if a.diloco_h:
        alpha, over, beta = _plan_network(a)
        if not (a.params and a.inner_ms) or beta is None:
            print("mccl plan --diloco-h: give --params, --inner-ms and the links' rate (--link-gbit or --tune)",
                  file=sys.stderr)
            return 2
        try:
            rows = [plan.diloco_project(a.params, a.diloco_h, a.inner_ms / 1000, int(n), a.wire, a.fragments,
                                        a.overlap, beta, alpha, over, a.host_s, a.sync_factor)
                    for n in a.nodes.split(",")]
        except ValueError as e:
            print(f"mccl plan --diloco-h: {e}", file=sys.stderr)
            return 2
        print(json.dumps(rows, indent=1) if a.json else
              plan.render_diloco(rows, a.params, a.diloco_h, a.inner_ms / 1000, 8.0 / beta))
        return 0

    if a.validate_collectives:
        alpha, over, beta = _plan_network(a)
        runs = {}
        for path in a.validate_collectives:
            with open(path) as f:
                data = json.load(f)
            # A file of several runs ({"runs": {name: mccl-bench JSON}}, as
            # docs/data keeps them) gives each run its own rows.
            many = isinstance(data, dict) and isinstance(data.get("runs"), dict)
            for key, run in (data["runs"].items() if many else [(None, data)]):
                if not isinstance(run, dict):
                    print(f"mccl plan --validate-collectives: {path}{f' (run {key})' if key else ''} "
                          f"is not a mccl-bench --json file", file=sys.stderr)
                    return 2
                runs[os.path.basename(path) + (f":{key}" if key else "")] = run
        try:
            rows = plan.validate_collectives(runs, alpha, over, beta, a.min_bytes, a.backend)
        except ValueError as e:
            print(f"mccl plan --validate-collectives: {e}", file=sys.stderr)
            return 2
        print(json.dumps(rows, indent=1) if a.json else
              f"mccl plan --validate-collectives: the all-reduce term of the algorithm each row records (the ring where none), alpha {alpha:g} us, o {over:g} us, "
              f"{a.backend}'s all_reduce of at least {a.min_bytes} bytes\n"
              + plan.render_collective_validation(rows))
        return 0

    if a.validate:
        with open(a.validate) as f:
            scaling = json.load(f)
        alpha, over, beta = _plan_network(a)
        if beta is None:
            print("mccl plan --validate: give the links' goodput (--link-gbit, e.g. from mccl netlab "
                  "goodput) or --tune FILE", file=sys.stderr)
            return 2
        try:
            rows = plan.validate(scaling, alpha, over, beta, a.backward_share, a.layers)
        except ValueError as e:
            print(f"mccl plan --validate {a.validate}: {e}", file=sys.stderr)
            return 2
        print(json.dumps(rows, indent=1) if a.json else
              f"mccl plan --validate {a.validate}: alpha {alpha:g} us, o {over:g} us, "
              f"{8 / beta:.3f} Gbit/s per link, backward {100 * a.backward_share:.0f} % of the step, "
              f"gradients ready {'per layer (' + str(rows[0]['layers']) + ')' if rows and rows[0]['layers'] else 'evenly'}\n"
              + plan.render_validation(rows))
        return 0

    fields = plan.inputs_from_files(a.scaling, a.tune, a.matmul, a.matmul_ref, a.backend)
    given = {"params": a.params, "batch": a.batch, "compute_s": a.step_ms / 1000 if a.step_ms else None,
             "hidden": a.hidden, "alpha_us": a.alpha_us, "overhead_us": a.overhead_us,
             "beta_ns_per_byte": 8.0 / a.link_gbit if a.link_gbit else None,
             "local_tflops": a.local_tflops, "ref_tflops": a.ref_tflops, "price_per_gpu_hour": a.price,
             "bucket_mb": a.bucket_mb, "layers": a.layers,
             "backward_share": a.backward_share if a.bucket_mb else None}
    for k, v in given.items():
        if v is not None:
            fields[k] = v
            fields["sources"][k] = "command line"
    if a.bucket_mb:
        fields.setdefault("hidden", 0.0)  # not used: the bucket model gives the overlap
    missing = [k for k in ("params", "batch", "compute_s", "hidden") if k not in fields]
    if missing:
        print(f"mccl plan: missing {', '.join(missing)}: give --scaling FILE (from mccl-bench scaling "
              f"--json) or --params/--batch/--step-ms and --hidden or --bucket-mb", file=sys.stderr)
        if "step time" in fields["sources"]:
            print(f"mccl plan: {fields['sources']['step time']}", file=sys.stderr)
        return 2
    inp = plan.Inputs(**fields, ref_name=a.ref_name, hours_per_night=a.hours)
    result = plan.plan(inp, [int(x) for x in a.nodes.split(",")])
    print(json.dumps(result, indent=1) if a.json else plan.render(result))
    return 0


def _elastic(a) -> int:
    from .elastic import admin

    if a.action == "serve":
        return admin.serve(a.host, a.port, None if a.no_http else a.http_port, a.sample_s)
    if a.action == "status" and (a.fleet or a.http or a.json):
        from .elastic.dashboard import report
        if not a.http and not a.store:
            print("mccl elastic status: give --store ADDRESS or --http URL", file=sys.stderr)
            return 2
        return report.main(a.http, a.store, a.json)
    if not a.store:
        print(f"mccl elastic {a.action}: give --store ADDRESS", file=sys.stderr)
        return 2
    if a.action == "end":
        return admin.end(a.store, a.job, a.at_step)
    if a.action == "resume":
        return admin.resume(a.store, a.job, a.checkpoint_dir)
    return getattr(admin, a.action)(a.store, a.job)


def _agent(a) -> int:
    import logging

    from .agent import Agent, load
    from .agent.activity import ActivityError, source_for
    from .agent.install import install
    from .agent.policy import Reading, decide

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        cfg = load(a.config)
        if a.action == "install":
            print(install(a.config, dry_run=a.dry_run))
            return 0
        source = source_for(cfg.activity, cfg.activity_arg)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if a.action == "check":
        import datetime
        try:
            idle, on_ac = source.read()
        except ActivityError as e:
            print(f"mccl agent: {e}", file=sys.stderr)
            return 1
        d = decide(cfg.rules, Reading(idle, on_ac, datetime.datetime.now()), running=False)
        print(f"idle {idle:.0f} s, power {'AC' if on_ac else 'battery' if on_ac is False else 'unknown'}: "
              f"{'would work' if d.work else 'would not work'} ({d.reason})")
        return 0
    Agent(cfg, source).run()
    return 0


def version_text() -> str:
    """mccl --version: this mccl, the torch it was compiled for, and the torch
    it runs with."""
    import platform

    import torch

    import mccl
    b = mccl.build_info()
    if b:
        built = (f"built for torch {b['torch']} (CUDA {b['torch_cuda'] or 'none'}, C++11 ABI "
                 f"{b['cxx11_abi']}) on {b['platform']}, Python {b['python']}, {b['compiler']}")
    else:
        built = "no build record (a source tree used in place?)"
    wheel = b.get("mccl", "")
    name = f"mccl {mccl.__version__}" + (f" (wheel {wheel})" if wheel not in ("", mccl.__version__) else "")
    return (f"{name}\n"
            f"  {built}\n"
            f"  running with torch {torch.__version__} on Python {platform.python_version()}")


class _Version(argparse.Action):
    """--version, computed only when asked (it imports torch and mccl's extension)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="mccl", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--version", action=_Version, nargs=0,
                    help="print this mccl's version and the torch it was built for, then exit")
    sub = ap.add_subparsers(dest="command", required=True)

    n = sub.add_parser("netlab", help="emulated switched-Ethernet fleet in network namespaces (root)")
    n.add_argument("--name", default="mccl", help="lab name (several labs can coexist)")
    ns = n.add_subparsers(dest="action", required=True)
    up = ns.add_parser("up", help="create N hosts on one switch")
    up.add_argument("hosts", type=int)
    up.add_argument("--rate", default="1gbit", help="per-host link rate, both directions (tc tbf)")
    up.add_argument("--delay", default="", help="one-way delay, e.g. 1ms (needs the kernel's netem)")
    up.add_argument("--loss", default="", help="packet loss, e.g. 0.1%% (needs netem)")
    up.add_argument("--autocorking", action="store_true",
                    help="keep the kernel's TCP autocorking in the hosts (off by default: on veths it "
                         "stalls short tails up to the delayed-ACK timer; see mccl.netlab)")
    up.add_argument("--congestion", default="", metavar="NAME",
                    help="the hosts' TCP congestion control, e.g. cubic (default: the kernel's; "
                         "one the kernel offers; added to net.ipv4.tcp_allowed_congestion_control if need be)")
    ns.add_parser("down", help="remove the lab (also the remains of a failed one)")
    st = ns.add_parser("status", help="hosts, rates, measured goodput")
    st.add_argument("--json", action="store_true")
    g = ns.add_parser("goodput", help="iperf3 on every ring-neighbour link at once")
    g.add_argument("--streams", type=int, default=4)
    g.add_argument("--seconds", type=float, default=5.0)
    g.add_argument("--json", action="store_true")
    r = ns.add_parser("rate", help="set one host's link rate")
    r.add_argument("host")
    r.add_argument("new_rate")
    for name, text in (("cut", "take a host's link down"), ("restore", "bring it back")):
        c = ns.add_parser(name, help=text)
        c.add_argument("host")
    rn = ns.add_parser("run", help="run a command on a host: mccl netlab run h0 -- CMD ...")
    rn.add_argument("host")
    rn.add_argument("cmd", nargs=argparse.REMAINDER)
    for action in ns.choices.values():  # --name also after the action
        action.add_argument("--name", default=argparse.SUPPRESS, help="lab name (default mccl)")

    d = sub.add_parser("doctor", help="interfaces, socket buffers and the pairwise goodput matrix of a job")
    d.add_argument("--nproc", type=int, default=0, help="local ranks to start (default 2, or one per lab host)")
    d.add_argument("--netlab", metavar="NAME", help="one rank per host of this network lab")
    d.add_argument("--bytes", type=int, default=16 << 20, help="message size per measurement")
    d.add_argument("--rounds", type=int, default=3, help="measurements per link (median)")
    d.add_argument("--timeout", type=float, default=600)
    d.add_argument("--json", action="store_true", help="machine-readable report from rank 0")
    pl = sub.add_parser("plan", help="project samples/s, efficiency and cloud-cost offset for a fleet")
    pl.add_argument("--nodes", default="24,100,200")
    pl.add_argument("--scaling", help="mccl-bench scaling --json output (step time, hidden share, model)")
    pl.add_argument("--backend", default="mccl", help="whose hidden share to use from --scaling")
    pl.add_argument("--tune", help="a tune file (mccl-bench --tune) for the fleet's network")
    pl.add_argument("--link-gbit", type=float, help="TCP goodput per link, Gbit/s (default 9.4: 10 GbE)")
    pl.add_argument("--alpha-us", type=float)
    pl.add_argument("--overhead-us", type=float)
    pl.add_argument("--params", type=int)
    pl.add_argument("--batch", type=int)
    pl.add_argument("--step-ms", type=float, help="one machine's step time without communication")
    pl.add_argument("--hidden", type=float, help="share of the all-reduce hidden behind backward (0-1)")
    pl.add_argument("--matmul", help="mccl-bench matmul --json of a fleet machine")
    pl.add_argument("--matmul-ref", help="mccl-bench matmul --json of the reference GPU")
    pl.add_argument("--local-tflops", type=float, help="a fleet machine's FP32 TFLOP/s")
    pl.add_argument("--ref-tflops", type=float, help="the reference GPU's TFLOP/s")
    pl.add_argument("--ref-name", default="A100")
    pl.add_argument("--price", type=float, help="cloud price per reference-GPU hour, USD")
    pl.add_argument("--hours", type=float, default=12.0, help="hours the fleet works per night")
    pl.add_argument("--validate", metavar="SCALING_JSON",
                    help="instead of projecting: predict the step time of every multi-rank run in this "
                         "mccl-bench scaling --json file from its one-rank run, its DDP bucket size and "
                         "the network (--link-gbit/--alpha-us or --tune), and print the error")
    pl.add_argument("--validate-collectives", nargs="+", metavar="BENCH_JSON",
                    help="instead of projecting: the plan's all-reduce time (for the algorithm each row "
                         "records; the ring where none) against every all_reduce "
                         "in these mccl-bench --json files (the links' goodput from each file where it was "
                         "measured, else --link-gbit or --tune), with the error")
    pl.add_argument("--min-bytes", type=int, default=1 << 20,
                    help="--validate-collectives: the smallest all_reduce compared (default 1 MiB)")
    pl.add_argument("--layers", type=int,
                    help="layers whose gradients become ready one after another in backward "
                         "(with --bucket-mb, or --validate where the ViT preset's depth is the default)")
    pl.add_argument("--bucket-mb", type=float,
                    help="project the overlap with the bucket model (DDP buckets of this size) instead "
                         "of a measured --hidden share")
    pl.add_argument("--backward-share", type=float, default=2 / 3,
                    help="share of the one-machine step spent in backward (--validate; default 2/3)")
    pl.add_argument("--json", action="store_true")
    # -- DiLoCo (mccl.elastic.DiLoCoState): the model of an outer sync (plan.diloco_project)
    pl.add_argument("--diloco-h", type=int, metavar="H",
                    help="instead: DiLoCo with H inner steps per round (needs --params, --inner-ms and the "
                         "links' rate): per round the outer syncs, the time they expose, the utilisation")
    pl.add_argument("--inner-ms", type=float, help="--diloco-h: one inner step's compute")
    pl.add_argument("--wire", default="bf16", choices=["fp32", "bf16", "fp16", "int8"],
                    help="--diloco-h: the outer all-reduce's wire dtype")
    pl.add_argument("--fragments", type=int, default=1, help="--diloco-h: streamed fragments")
    pl.add_argument("--overlap", type=int, help="--diloco-h: inner steps each fragment's sync overlaps "
                                                "(default: 0 with one fragment, the gap between fragments with more)")
    pl.add_argument("--host-s", type=float, default=0.0,
                    help="--diloco-h: the outer steps' host work per round (mccl-bench diloco measures it)")
    pl.add_argument("--sync-factor", type=float, default=1.0,
                    help="--diloco-h: measured outer-sync time over the model's (mccl-bench diloco prints both)")

    e = sub.add_parser("elastic", help="elastic jobs: the store they meet at, and who is in")
    es = e.add_subparsers(dest="action", required=True)
    sv = es.add_parser("serve", help="run the jobs' TCPStore (on the one machine that stays on)")
    sv.add_argument("--host", default="0.0.0.0", help="the address the store and the status page listen on")
    sv.add_argument("--port", type=int, default=29400)
    sv.add_argument("--http-port", type=int, default=29480,
                    help="the fleet's status page (/, /api/fleet, /metrics; docs/status-page.md): default 29480, "
                         "0 a free port")
    sv.add_argument("--no-http", action="store_true", help="serve the store only, no status page")
    sv.add_argument("--sample-s", type=float, default=10.0,
                    help="seconds between the samples of each job's night on the page (24 h are kept)")
    for name, text in (("status", "a job's state, generation, members and waiting joiners"),
                       ("create", "create a job: its first members may found it"),
                       ("end", "end a job (at its next step boundary, or --at-step); a dormant one at once"),
                       ("resume", "let members take up a stopped or ended job from its checkpoint")):
        x = es.add_parser(name, help=text)
        x.add_argument("--store", required=name != "status",
                       help="the job's store: host:port, tcp://host:port or etcd://h1:2379,h2:2379,...")
        x.add_argument("--job", default="default")
        if name == "status":
            x.add_argument("--fleet", action="store_true",
                           help="every job and machine (from --store, or the page at --http), not one job")
            x.add_argument("--http", metavar="URL",
                           help="read the fleet from a status page (http://host:29480); implies --fleet")
            x.add_argument("--json", action="store_true", help="the fleet as the page's JSON (/api/fleet)")
        if name == "end":
            x.add_argument("--at-step", type=int, default=None, help="the step to end at (default: the next)")
        if name == "resume":
            x.add_argument("--checkpoint-dir", help="the job's checkpoint folder: resume from its newest checkpoint "
                                                    "when the store holds no record of the job")

    ag = sub.add_parser("agent", help="lend this machine to the fleet while its person is away")
    ags = ag.add_subparsers(dest="action", required=True)
    for name, text in (("run", "the agent's loop (what the installed service runs)"),
                       ("check", "one reading, and what the rules decide"),
                       ("install", "a launchd agent (macOS) or systemd user service (Linux)")):
        x = ags.add_parser(name, help=text)
        x.add_argument("--config", required=True, help="the fleet's TOML file (see mccl.agent.config)")
        if name == "install":
            x.add_argument("--dry-run", action="store_true", help="print the file instead of writing it")

    st = sub.add_parser("selftest", add_help=False,
                        help="run every collective, DDP and FSDP2 on this machine's device; print a report")
    st.add_argument("args", nargs=argparse.REMAINDER)
    sc = sub.add_parser("secret", help="write a job secret file for MCCL_SECRET_FILE (32 random bytes, mode 600)")
    sc.add_argument("path", nargs="?", help="where to write it (refused if it exists, unless --force); "
                                            "with --token: the secret file to read")
    sc.add_argument("--force", action="store_true", help="replace an existing file")
    sc.add_argument("--token", action="store_true",
                    help="print the status page's token for the job secret at PATH (default: MCCL_SECRET_FILE "
                         "or MCCL_SECRET) instead of writing a file")
    return ap


def _secret(a) -> int:
    from mccl.secret import job_secret, read_secret_file, status_token, write_secret
    if a.token:
        try:
            secret = read_secret_file(a.path) if a.path else job_secret()
        except ValueError as e:
            print(f"mccl secret --token: {e}", file=sys.stderr)
            return 1
        if secret is None:
            print("mccl secret --token: give the secret file (or set MCCL_SECRET_FILE)", file=sys.stderr)
            return 2
        print(status_token(secret))
        return 0
    if not a.path:
        print("mccl secret: give the path of the file to write", file=sys.stderr)
        return 2
    try:
        path = write_secret(a.path, force=a.force)
    except (FileExistsError, OSError) as e:
        print(f"mccl secret: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path} (32 random bytes, mode 600).\n"
          f"Copy it to every machine of the job (same path or not), readable only by the user "
          f"that runs the workers, and set MCCL_SECRET_FILE={path} for every rank.")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["selftest"]:  # its own options (mccl.selftest)
        from mccl.selftest import main as selftest
        return selftest(argv[1:])
    a = parser().parse_args(argv)
    if a.command == "netlab":
        return _netlab(a)
    if a.command == "doctor":
        return _doctor(a, argv)
    if a.command == "plan":
        return _plan(a)
    if a.command == "elastic":
        return _elastic(a)
    if a.command == "agent":
        return _agent(a)
    if a.command == "secret":
        return _secret(a)
    return 2


if __name__ == "__main__":
    sys.exit(main())
