//! A worker that hangs: it registers, heartbeats, takes every task it is
//! given and never answers one; or, with `--lie`, answers every task at
//! once with a wrong count (the true moves, one too many counted). For the
//! process tests and benchmarks of stragglers and untrusted workers, and
//! the nemesis run; never part of a product.
//!
//! `colball-hung-worker URL [--name NAME] [--slots N] [--lie]` (defaults
//! `hung`, 2). It prints `registered` once the coordinator has taken it,
//! then `held N` each time it is given tasks (N in all so far), and exits
//! when the coordinator ends its session.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use colball_proto::PROTOCOL_VERSION;
use colball_proto::v1::workers_client::WorkersClient;
use colball_proto::v1::{self, coordinator_message, worker_message};
use colball_proto::work::{outcome_from_notation, task_puzzle};
use colball_solver::BidirSearch;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

struct Args {
    url: String,
    name: String,
    slots: u32,
    lie: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut url = None;
    let mut name = "hung".to_string();
    let mut slots = 2;
    let mut lie = false;
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or(format!("{flag} needs a value"));
        match arg.as_str() {
            "--name" => name = value("--name")?,
            "--slots" => {
                slots = value("--slots")?
                    .parse()
                    .map_err(|e| format!("--slots: {e}"))?
            }
            "--lie" => lie = true,
            _ if url.is_none() && !arg.starts_with('-') => url = Some(arg),
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    Ok(Args {
        url: url.ok_or("the coordinator's URL is missing")?,
        name,
        slots,
        lie,
    })
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // Nobody reading is no reason to stop hanging.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!(
                "colball-hung-worker: {e}\nusage: colball-hung-worker URL [--name NAME] [--slots N] [--lie]"
            );
            return ExitCode::from(2);
        }
    };
    match hang(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("colball-hung-worker: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn hang(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut client = WorkersClient::connect(args.url).await?;
    let (out, rx) = mpsc::channel(16);
    let message = |kind| v1::WorkerMessage { kind: Some(kind) };
    out.send(message(worker_message::Kind::Register(v1::Register {
        protocol_version: PROTOCOL_VERSION,
        name: args.name,
        slots: args.slots,
    })))
    .await?;
    let mut inbound = client.session(ReceiverStream::new(rx)).await?.into_inner();
    say("registered");
    let beat = message(worker_message::Kind::Heartbeat(v1::Heartbeat {
        cache: None,
    }));
    let beats = out.clone();
    tokio::spawn(async move {
        while beats.send(beat.clone()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut held = 0;
    let mut search = BidirSearch::new();
    while let Some(m) = inbound.message().await? {
        if let Some(coordinator_message::Kind::Assign(a)) = m.kind {
            held += a.tasks.len();
            say(&format!("held {held}"));
            if args.lie {
                let results = a.tasks.iter().map(|t| lie(&mut search, t)).collect();
                out.send(message(worker_message::Kind::Results(v1::Results {
                    results,
                })))
                .await?;
            }
        }
    }
    Ok(())
}

/// A wrong answer to `task`: its true moves, counted one too many (a task
/// that does not decode is answered "1 move").
fn lie(search: &mut BidirSearch, task: &v1::Task) -> v1::TaskResult {
    let outcome = task_puzzle(task).ok().map(|puzzle| {
        let truth = search.solve(&puzzle);
        outcome_from_notation(puzzle.size(), truth.answer() + 1, &truth.notation())
    });
    v1::TaskResult {
        task_id: task.task_id,
        outcome,
    }
}
