#!/usr/bin/env python3
"""The admin endpoint read by operators' own tools (docs/admin.md).

Starts the echo example server with an admin endpoint, makes a known number
of calls with the echo client, then checks what the real tools see:

  promtool    `promtool check metrics` accepts /metrics, lint included.
  prometheus  Debian's Prometheus scrapes the server every second; its HTTP
              API returns exactly the calls made, before and after more
              calls, and histogram_quantile(0.5) of the handling-time
              histogram lies in the bucket that holds the server's own p50.
  chromium    headless Chromium loads the status page; the page it renders
              shows the method with the calls just made. With --screenshot
              FILE it also saves a picture of the page (docs/admin.png).

Prints "OPS NAME PASSED" or "OPS NAME FAILED: why" per check; exits non-zero
if any failed. Needs /usr/bin/prometheus, promtool and chromium (tools/test
installs them on demand).

  tests/ops/admin_tools_test.py --bin BAZEL_BIN [--screenshot FILE]
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SERVICE, METHOD = "rdmarpc.examples.Echo", "Say"
FIRST_CALLS, MORE_CALLS = 37, 13


class CheckFailed(Exception):
    pass


def require(condition, message):
    if not condition:
        raise CheckFailed(message)


def fetch(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def wait_for(what, condition, timeout=60):
    """Polls condition() (None or a falsy value: not yet) until it holds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if last:
                return last
        except (OSError, ValueError, KeyError, IndexError) as error:
            last = error
        time.sleep(0.2)
    raise CheckFailed(f"timed out after {timeout} s waiting for {what} "
                      f"(last: {last!r})")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def echo_calls(client, uri, count):
    subprocess.run([client, "--uri", uri, "--count", str(count), "--size",
                    "100"], check=True, capture_output=True, timeout=120)


def buckets_of(metrics):
    """The Echo method's cumulative (le, count) pairs, in order of le."""
    pattern = re.compile(
        r'^rdmarpc_server_handling_seconds_bucket\{service="%s",'
        r'method="%s",le="([^"]+)"\} (\S+)$' % (re.escape(SERVICE), METHOD),
        re.M)
    return [(float(le), float(count)) for le, count in
            pattern.findall(metrics)]


class Prometheus:
    def __init__(self, work, target):
        self.port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n"
                    "scrape_configs:\n  - job_name: rdmarpc\n"
                    f"    static_configs: [{{targets: [\"{target}\"]}}]\n")
        self.log = open(os.path.join(work, "prometheus.log"), "w")
        self.process = subprocess.Popen(
            ["/usr/bin/prometheus", f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path, **query):
        url = (f"http://127.0.0.1:{self.port}/api/v1/{path}?" +
               urllib.parse.urlencode(query))
        reply = json.loads(fetch(url))
        require(reply["status"] == "success", f"{url}: {reply}")
        return reply["data"]

    def scalar(self, query):
        """The value of a query with one series, or None while it has none."""
        result = self.api("query", query=query)["result"]
        require(len(result) <= 1, f"{query}: {len(result)} series")
        return float(result[0]["value"][1]) if result else None

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def check_promtool(admin):
    metrics = fetch(admin + "/metrics")
    checked = subprocess.run(["/usr/bin/promtool", "check", "metrics"],
                             input=metrics, capture_output=True, text=True,
                             timeout=60)
    # Exit 0 and nothing printed: no errors and no lint problems.
    require(checked.returncode == 0 and not checked.stdout.strip() and
            not checked.stderr.strip(),
            f"promtool exited {checked.returncode}: {checked.stdout} "
            f"{checked.stderr}")
    return f"{len(metrics.splitlines())} lines"


def check_prometheus(work, admin, client, uri):
    target = urllib.parse.urlparse(admin).netloc
    prometheus = Prometheus(work, target)
    try:
        wait_for("Prometheus's API", lambda: prometheus.api("targets"))
        ok = (f'rdmarpc_server_calls_total{{service="{SERVICE}",'
              f'method="{METHOD}",code="OK"}}')
        # Its first scrapes see the calls made before it started...
        first = wait_for(f"{ok} = {FIRST_CALLS}",
                         lambda: prometheus.scalar(ok) == FIRST_CALLS)
        targets = prometheus.api("targets")["activeTargets"]
        require(len(targets) == 1 and targets[0]["health"] == "up",
                f"targets: {targets}")
        # ...and later ones the calls made since: exactly.
        echo_calls(client, uri, MORE_CALLS)
        total = FIRST_CALLS + MORE_CALLS
        wait_for(f"{ok} = {total}", lambda: prometheus.scalar(ok) == total)
        wait_for("handling_seconds_count = calls", lambda: prometheus.scalar(
            f'rdmarpc_server_handling_seconds_count{{method="{METHOD}"}}')
            == total)
        require(first, "")
        # histogram_quantile interpolates inside the bucket that holds the
        # median; the server's own p50 (its status page, from finer
        # buckets) must lie in that bucket too.
        buckets = buckets_of(fetch(admin + "/metrics"))
        require(buckets and buckets[-1][1] == total,
                f"buckets {buckets[-3:]} do not end at {total}")
        rank = total / 2
        index = next(i for i, (_, count) in enumerate(buckets)
                     if count >= rank)
        low = buckets[index - 1][0] if index > 0 else 0.0
        high = buckets[index][0]
        quantile = prometheus.scalar(
            "histogram_quantile(0.5, rdmarpc_server_handling_seconds_bucket"
            f'{{method="{METHOD}"}})')
        require(quantile is not None and low <= quantile <= high,
                f"histogram_quantile(0.5) = {quantile}, bucket "
                f"[{low}, {high}]")
        server_p50 = own_p50_seconds(fetch(admin + "/"))
        require(abs(server_p50 - quantile) <= high - low,
                f"server's p50 {server_p50} s is more than the bucket's "
                f"width {high - low} s from Prometheus's {quantile} s")
        return (f"{ok} = {total}; histogram_quantile(0.5) = "
                f"{quantile * 1e6:.1f} us in bucket ({low * 1e6:g}, "
                f"{high * 1e6:g}] us, server's p50 {server_p50 * 1e6:.1f} us")
    finally:
        prometheus.stop()


def method_row(html):
    """The cells of the Echo method's row of the status page's table."""
    row = re.search(r'<tr><td class="name">%s/%s</td>(.*?)</tr>' %
                    (re.escape(SERVICE), METHOD), html, re.S)
    require(row, "the status page has no row for the method")
    return re.findall(r"<td>([^<]*)</td>", row.group(1))


def own_p50_seconds(html):
    # Columns: calls, ok, errors, calls/s, p50 us, p99 us.
    return float(method_row(html)[4]) * 1e-6


def chromium(*args, work):
    command = ["/usr/bin/chromium", "--headless", "--no-sandbox",
               "--disable-gpu", "--disable-dev-shm-usage",
               f"--user-data-dir={os.path.join(work, 'chromium')}", *args]
    return subprocess.run(command, capture_output=True, text=True,
                          timeout=180)


def check_chromium(work, admin, screenshot):
    total = FIRST_CALLS + MORE_CALLS
    dumped = chromium("--dump-dom", admin + "/", work=work)
    require(dumped.returncode == 0,
            f"chromium exited {dumped.returncode}: {dumped.stderr[-500:]}")
    # The DOM Chromium built, not the bytes served: the browser read it.
    require("<title>" in dumped.stdout, "chromium rendered no page")
    cells = method_row(dumped.stdout)
    require(cells[0] == str(total) and cells[1] == str(total),
            f"the page shows calls {cells[0]}, ok {cells[1]}; made {total}")
    said = f"the rendered page shows {SERVICE}/{METHOD} with {total} calls"
    if screenshot:
        shot = chromium(f"--screenshot={os.path.abspath(screenshot)}",
                        "--window-size=1100,900", "--hide-scrollbars",
                        admin + "/", work=work)
        require(shot.returncode == 0 and os.path.getsize(screenshot) > 10000,
                f"screenshot failed: {shot.stderr[-500:]}")
        said += f"; screenshot in {screenshot}"
    return said


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="bazel-bin")
    parser.add_argument("--screenshot", help="save the status page as PNG")
    args = parser.parse_args()
    server_bin = os.path.join(args.bin, "examples/echo/server")
    client = os.path.join(args.bin, "examples/echo/client")
    work = tempfile.mkdtemp(prefix="rdmarpc-ops-")
    server = subprocess.Popen(
        [server_bin, "--uri", "tcp://127.0.0.1:0", "--admin",
         "http://127.0.0.1:0"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    failed = 0
    try:
        uri = admin = None
        for line in server.stdout:
            if line.startswith("echo server listening on "):
                uri = line.split()[-1]
            elif line.startswith("echo server admin on "):
                admin = line.split()[-1]
                break
        if not (uri and admin):
            print("OPS server FAILED: the echo server did not start")
            return 1
        echo_calls(client, uri, FIRST_CALLS)
        checks = [
            ("promtool", lambda: check_promtool(admin)),
            ("prometheus", lambda: check_prometheus(work, admin, client,
                                                    uri)),
            ("chromium", lambda: check_chromium(work, admin,
                                                args.screenshot)),
        ]
        for name, check in checks:
            started = time.monotonic()
            try:
                said = check()
                print(f"OPS {name} PASSED ({time.monotonic() - started:.1f} "
                      f"s): {said}")
            except (CheckFailed, OSError, subprocess.SubprocessError) as e:
                failed += 1
                print(f"OPS {name} FAILED: {e}")
            sys.stdout.flush()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
