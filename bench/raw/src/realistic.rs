//! The realistic case set (`bench/realistic/cases.txt`) through raw bashkit:
//! the baseline of `bench/realistic.exs`. Per case, three samples:
//! `realistic.NAME.oneshot` (a fresh interpreter built and its setup and
//! script run), `realistic.NAME.session` (the script again on one
//! interpreter, set up once; bashkit's buffered `exec`) and
//! `realistic.NAME.session_live` (the same through live execution with an
//! output sink, as the NIF runs a script that is not short: the floor of
//! that path); and `realistic.NAME.stdout`, what the script printed.

use std::sync::Arc;
use std::time::Duration;

use super::{build_bash, execute_with_sink, sample, timed, Bench, Budget};

/// One case of the file: the format is read the same way by
/// `bench/lib/realistic_cases.exs`.
struct Case {
    name: String,
    setup: String,
    script: String,
}

fn parse(text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut block: Option<&str> = None;
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("=== ") {
            let name = header.split_whitespace().next().expect("case name");
            cases.push(Case {
                name: name.to_string(),
                setup: String::new(),
                script: String::new(),
            });
            block = None;
        } else if line == "--- setup" {
            block = Some("setup");
        } else if line == "--- script" {
            block = Some("script");
        } else if let (Some(case), Some(which)) = (cases.last_mut(), block) {
            let target = if which == "setup" {
                &mut case.setup
            } else {
                &mut case.script
            };
            target.push_str(line);
            target.push('\n');
        }
    }
    cases
}

/// Each case's share of the run: a short one, so that the whole set takes
/// about a minute and a half.
const PER_CASE: Budget = Budget::new(20, 50, 5_000, 300);

impl Bench {
    pub(super) fn realistic(&mut self, path: &str) {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let budget = self.budget(PER_CASE);
        for case in parse(&text) {
            let whole = format!("{}{}", case.setup, case.script);
            let oneshot = sample(budget, || {
                timed(|| {
                    let mut bash = build_bash();
                    let _ = rt.block_on(bash.exec(&whole));
                    bash
                })
                .0
            });
            let mut bash = build_bash();
            if !case.setup.is_empty() {
                let _ = rt.block_on(bash.exec(&case.setup));
            }
            let first = rt.block_on(bash.exec(&case.script));
            let stdout = match first {
                Ok(out) => String::from_utf8_lossy(out.stdout.as_bytes()).into_owned(),
                Err(e) => format!("error: {e}"),
            };
            let session = sample(budget, || timed(|| rt.block_on(bash.exec(&case.script))).0);
            let live = sample(budget, || -> Duration {
                timed(|| execute_with_sink(rt, &mut bash, &case.script)).0
            });
            let name = &case.name;
            self.info(&format!("realistic.{name}.stdout"), stdout);
            self.push_sample(&format!("realistic.{name}.oneshot"), oneshot);
            self.push_sample(&format!("realistic.{name}.session"), session);
            self.push_sample(&format!("realistic.{name}.session_live"), live);
        }
    }
}
