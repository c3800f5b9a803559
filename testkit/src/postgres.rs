//! A throwaway PostgreSQL server for tests: `initdb` into a temporary
//! directory, `postgres` on a free loopback port, stopped by its PID when
//! dropped (and the directory removed).
//!
//! The server refuses to run as root: as root, it runs as the `postgres`
//! user (Debian's package creates it). The binaries are found in
//! `COLBALL_PG_BIN`, else `pg_config --bindir`, else the newest
//! `/usr/lib/postgresql/*/bin`; `scripts/test` installs Debian's
//! `postgresql` when none is there.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;

use crate::procs::{Proc, WAIT};

/// A running server; its superuser is `colball` (trust authentication, on
/// loopback only).
#[derive(Debug)]
pub struct TempPostgres {
    /// `None` only while it is restarted.
    proc: Option<Proc>,
    bin: PathBuf,
    dir: PathBuf,
    owner: Option<(u32, u32)>,
    /// Server settings (`-c NAME=VALUE`) beyond the defaults.
    settings: Vec<String>,
    /// The superuser's password over TCP, when the server asks for one
    /// ([`Self::start_with_password`]; trust otherwise).
    password: Option<String>,
    pub port: u16,
}

const USER: &str = "colball";

impl TempPostgres {
    /// Creates and starts a server. Panics saying what is missing when
    /// PostgreSQL is not installed.
    pub fn start() -> TempPostgres {
        TempPostgres::start_with(&[])
    }

    /// [`Self::start`] with server settings (`NAME=VALUE`, as `-c` takes
    /// them), for example `shared_preload_libraries=pg_stat_statements`.
    pub fn start_with(settings: &[&str]) -> TempPostgres {
        TempPostgres::start_with_files(settings, &[], None)
    }

    /// [`Self::start`] asking for the superuser's password over TCP
    /// (SCRAM), `password`.
    pub fn start_with_password(password: &str) -> TempPostgres {
        TempPostgres::start_with_files(&[], &[], Some(password))
    }

    /// [`Self::start`] serving TLS (besides plain connections) with this
    /// certificate and key (PEM).
    pub fn start_tls(cert: &str, key: &str) -> TempPostgres {
        TempPostgres::start_with_files(
            &[
                "ssl=on",
                "ssl_cert_file=server.crt",
                "ssl_key_file=server.key",
            ],
            &[("server.crt", cert), ("server.key", key)],
            None,
        )
    }

    /// [`Self::start_with`], and these files written into its data
    /// directory (the server's own, mode 0600) before it starts.
    fn start_with_files(
        settings: &[&str],
        files: &[(&str, &str)],
        password: Option<&str>,
    ) -> TempPostgres {
        static N: AtomicU32 = AtomicU32::new(0);
        let bin = bin_dir();
        let owner = owner();
        let dir = std::env::temp_dir().join(format!(
            "colball-pg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("give it to postgres");
        }
        let mut initdb = as_owner(Command::new(bin.join("initdb")), owner);
        match password {
            None => initdb.arg("--auth=trust"),
            Some(password) => {
                let file = dir.join("pwfile");
                std::fs::write(&file, password).expect("write the password file");
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(&file, Some(uid), Some(gid))
                        .expect("give it to postgres");
                }
                initdb
                    .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
                    .arg(format!("--pwfile={}", file.display()))
            }
        };
        let status = initdb
            .args(["--no-sync", "--encoding=UTF8", "--locale=C"])
            .arg(format!("--username={USER}"))
            .arg("-D")
            .arg(dir.join("data"))
            .stdout(Stdio::null())
            .status()
            .expect("run initdb");
        assert!(status.success(), "initdb failed: {status}");
        for (name, text) in files {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.join("data").join(name);
            std::fs::write(&path, text).expect("write a server file");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .expect("make it the server's alone");
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("give it to postgres");
            }
        }
        let mut pg = TempPostgres {
            proc: None,
            bin,
            dir,
            owner,
            settings: settings.iter().map(|s| s.to_string()).collect(),
            password: password.map(String::from),
            port: free_port(),
        };
        // The port was free when picked, but another process may take it
        // before the server binds it: then it starts on another.
        let mut outcome = pg.try_run();
        for _ in 0..4 {
            match &outcome {
                Err(log) if log.contains("could not bind") => {
                    pg.port = free_port();
                    outcome = pg.try_run();
                }
                _ => break,
            }
        }
        if let Err(log) = outcome {
            panic!("postgres exited before it was ready:\n{log}");
        }
        pg
    }

    /// Starts the server on its port and waits until it takes connections.
    fn run(&mut self) {
        if let Err(log) = self.try_run() {
            panic!("postgres exited before it was ready:\n{log}");
        }
    }

    /// [`Self::run`], or the server's last lines when it exited before it
    /// was ready.
    fn try_run(&mut self) -> Result<(), String> {
        let mut child = as_owner(Command::new(self.bin.join("postgres")), self.owner)
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start postgres");
        let stderr = child.stderr.take().expect("piped stderr");
        self.proc = Some(Proc(child));
        // Its log, read to the end (so it never blocks on a full pipe):
        // the ready line is passed on, and if the log ends before it (the
        // server exited), its last lines. (A FATAL line alone is no sign:
        // clients refused during recovery get one each.)
        let (ready, said) = mpsc::channel();
        std::thread::spawn(move || {
            let mut last = std::collections::VecDeque::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("ready to accept connections") {
                    let _ = ready.send(Ok(()));
                }
                last.push_back(line);
                if last.len() > 5 {
                    last.pop_front();
                }
            }
            let _ = ready.send(Err(Vec::from(last).join("\n")));
        });
        match said.recv_timeout(WAIT) {
            Ok(outcome) => outcome,
            Err(_) => panic!("postgres did not start within {WAIT:?}"),
        }
    }

    /// The server's PID.
    pub fn pid(&self) -> u32 {
        self.proc.as_ref().expect("running").pid()
    }

    /// A URL of database `db` as the superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates database `db`; its URL.
    pub fn database(&self, db: &str) -> String {
        let mut createdb = Command::new(self.bin.join("createdb"));
        if let Some(password) = &self.password {
            createdb.env("PGPASSWORD", password);
        }
        let status = createdb
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                db,
            ])
            .status()
            .expect("run createdb");
        assert!(status.success(), "createdb {db}: {status}");
        self.url(db)
    }

    /// Stops the server in immediate mode (SIGQUIT: no checkpoint, as a
    /// crash) and starts it again on the same port and data.
    pub fn restart_immediate(&mut self) {
        if let Some(mut proc) = self.proc.take() {
            proc.signal("QUIT");
            proc.wait_exit();
        }
        self.run();
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        if let Some(proc) = self.proc.take() {
            // Fast shutdown; the Proc's drop kills what is left.
            proc.signal("INT");
            let mut proc = proc;
            proc.wait_exit();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `command` as `owner` (uid, gid) when there is one.
fn as_owner(mut command: Command, owner: Option<(u32, u32)>) -> Command {
    if let Some((uid, gid)) = owner {
        command.gid(gid).uid(uid);
    }
    command
}

/// As root: the `postgres` user's uid and gid; else none (run as self).
fn owner() -> Option<(u32, u32)> {
    let id = |flag: &str, user: Option<&str>| -> Option<u32> {
        let out = Command::new("id").arg(flag).args(user).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    if id("-u", None) != Some(0) {
        return None;
    }
    let uid = id("-u", Some("postgres")).expect(
        "running as root, the tests run PostgreSQL as the `postgres` user, which does not exist: \
         install Debian's postgresql (scripts/test does)",
    );
    let gid = id("-g", Some("postgres")).expect("the postgres user's group");
    Some((uid, gid))
}

/// Where `initdb` and `postgres` are.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("COLBALL_PG_BIN") {
        return dir.into();
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort_by_key(|p| version(p));
    found.pop().unwrap_or_else(|| {
        panic!(
            "PostgreSQL is not installed (no initdb in COLBALL_PG_BIN, pg_config --bindir or \
             /usr/lib/postgresql/*/bin): scripts/test installs Debian's postgresql"
        )
    })
}

/// The major version of `/usr/lib/postgresql/N/bin`.
fn version(bin: &Path) -> u32 {
    bin.parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}
