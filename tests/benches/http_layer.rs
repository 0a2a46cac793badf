//! What the HTTP layer costs: requests per second through a small axum app with and without
//! `RateLimitLayer` (memory store, a limit no run reaches, keyed by the peer address), driven
//! by `wrk` on loopback, in interleaved rounds of one run (a balanced order, see `order`).
//! Five variants (`support/http_apps.rs`): no layer; no layer but the five header fields added
//! statically, names and values parsed once (what adding them costs, apart from computing
//! them); a middleware that does nothing (what any boxed axum middleware costs); the layer
//! with headers off; the layer as shipped.
//! Beside throughput, the server's own CPU time per request (this process; `wrk` is another):
//! on a 2-core machine the load generator shares the cores, so throughput also moves with
//! what `wrk` spends parsing, and CPU per request is what the server pays.
//!
//! `cargo bench -p ratelimit-tests --features axum --bench http_layer` (needs `wrk`:
//! `apt-get install -y wrk`). `ROUNDS`, `SECONDS` and `CONNECTIONS` change the run; `PIN=0`
//! leaves the server and `wrk` to the scheduler instead of a CPU each (see `Pinning`). Each
//! figure is printed as the median of the rounds with their minimum and maximum.
//! Figures: BENCHMARKS.md, section `http_layer`.

#[path = "support/http_apps.rs"]
mod http_apps;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

use axum::Router;
use ratelimit::SystemClock;

use http_apps::{apps, N, VARIANTS};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}/")
}

/// Where the server and `wrk` run: with `PIN=1` (the default when `taskset` is there and the
/// machine has two CPUs or more), the server's threads on CPU 0 and `wrk` on CPU 1, so neither
/// takes the other's core and the rounds move less; `PIN=0` leaves both to the scheduler.
struct Pinning {
    wrk_cpu: Option<String>,
}

impl Pinning {
    /// Pins this process's threads (the server, all of them: call it once they exist) to CPU
    /// 0, if pinning is on.
    fn new() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let taskset = Command::new("taskset").arg("-V").output().is_ok();
        if env("PIN", u64::from(cpus >= 2 && taskset)) == 0 {
            return Pinning { wrk_cpu: None };
        }
        let pid = std::process::id().to_string();
        let pinned = Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &pid])
            .output()
            .is_ok_and(|out| out.status.success());
        assert!(pinned, "taskset -a -p -c 0 {pid} failed: run with PIN=0");
        Pinning {
            wrk_cpu: Some("1".to_owned()),
        }
    }

    /// `wrk`, on its own CPU when pinned.
    fn wrk(&self) -> Command {
        match &self.wrk_cpu {
            Some(cpu) => {
                let mut command = Command::new("taskset");
                command.args(["-c", cpu, "wrk"]);
                command
            }
            None => Command::new("wrk"),
        }
    }
}

/// `wrk`'s requests per second and 99th percentile latency (µs) for `url`.
fn wrk(pinning: &Pinning, url: &str, seconds: u64, connections: u64) -> (f64, f64) {
    let out = pinning
        .wrk()
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            url,
        ])
        .output()
        .expect("wrk runs (apt-get install -y wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk's output:\n{text}"));
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .map(|v| micros(v.trim()))
        .unwrap_or_else(|| panic!("no 99% latency in wrk's output:\n{text}"));
    (rps, p99)
}

/// `wrk`'s latency text (`812.00us`, `1.23ms`) in microseconds.
fn micros(text: &str) -> f64 {
    let split = text.find(|c: char| c.is_alphabetic()).unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: f64 = n.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n,
        "ms" => n * 1_000.0,
        "s" => n * 1_000_000.0,
        _ => f64::NAN,
    }
}

/// This process's CPU time (user + system) in seconds, from `/proc/self/stat`: the server's
/// cost, whatever the load generator (another process) spends.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which may hold spaces) start at the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("stat") + 2..]
        .split(' ')
        .collect();
    let ticks = |i: usize| fields[i].parse::<f64>().expect("ticks");
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    (ticks(11) + ticks(12)) / 100.0
}

/// A balanced order for `round`: cyclic, starting at `round mod N` (a Latin square: each
/// variant in each position equally often over every `N` rounds), so no variant runs twice in
/// a row, within a round or across two (a round ends with the variant before the one the
/// next round starts after).
fn order(round: usize) -> impl Iterator<Item = usize> {
    (0..N).map(move |i| (round + i) % N)
}

fn main() {
    // `cargo test --benches` runs each bench once with no `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let (rounds, seconds, connections) =
        (env("ROUNDS", 10), env("SECONDS", 4), env("CONNECTIONS", 32));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let urls: Vec<String> = runtime.block_on(async {
        let mut urls = Vec::new();
        for app in apps(Arc::new(SystemClock)) {
            urls.push(serve(app).await);
        }
        urls
    });
    let pinning = Pinning::new();
    // Warm-up: connections, allocator, the store's shards.
    for url in &urls {
        wrk(&pinning, url, 1, connections);
    }
    let mut ratios = vec![Vec::new(); N];
    let mut cpu_us = vec![Vec::new(); N];
    let mut p99_added = vec![Vec::new(); N];
    for round in 0..rounds as usize {
        let mut rps = [0.0; N];
        let mut p99 = [0.0; N];
        for v in order(round) {
            let cpu = cpu_seconds();
            let (r, p) = wrk(&pinning, &urls[v], seconds, connections);
            cpu_us[v].push((cpu_seconds() - cpu) * 1e6 / (r * seconds as f64));
            rps[v] = r;
            p99[v] = p;
        }
        print!("round {round}:");
        for v in 0..N {
            ratios[v].push(rps[v] / rps[0]);
            p99_added[v].push(p99[v] - p99[0]);
            print!(" {:.0} req/s ({:.3}x)", rps[v], rps[v] / rps[0]);
        }
        println!();
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.trim();
    let pinned = if pinning.wrk_cpu.is_some() {
        "server on CPU 0, wrk on CPU 1"
    } else {
        "not pinned"
    };
    println!("http_layer: medians of {rounds} rounds [min–max]; {pinned}; load average after the run: {load}");
    println!("| variant | throughput / no layer | server CPU per request | p99 added |");
    println!("| --- | --- | --- | --- |");
    for v in 0..N {
        let (ratio, cpu, p99) = (
            spread(&ratios[v]),
            spread(&cpu_us[v]),
            spread(&p99_added[v]),
        );
        println!(
            "| {} | {:.3}x [{:.3}–{:.3}] | {:.2} µs [{:.2}–{:.2}] | {:.0} µs [{:.0}–{:.0}] |",
            VARIANTS[v], ratio.0, ratio.1, ratio.2, cpu.0, cpu.1, cpu.2, p99.0, p99.1, p99.2
        );
    }
}

/// The median, the minimum and the maximum of `xs`.
fn spread(xs: &[f64]) -> (f64, f64, f64) {
    let mut xs = xs.to_vec();
    xs.sort_by(|a, b| a.total_cmp(b));
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}
