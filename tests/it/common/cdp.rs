//! A small client of the Chrome DevTools Protocol: Debian's headless Chromium, started on a
//! loopback debugging port, driven over its WebSocket (one page, one flat session). What the
//! operator page's test needs of a browser: navigate, evaluate script, wait for a load,
//! collect what the console shows (exceptions, errors, CSP violations), take a screenshot.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Chromium on the PATH, if any.
pub fn chromium() -> Option<String> {
    super::found(&["chromium", "chromium-browser"])
}

pub struct Browser {
    _process: tokio::process::Child,
    _profile: tempfile::TempDir,
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    /// What the console showed: exceptions, `console.error`, log entries of level error
    /// (CSP violations among them).
    pub problems: Vec<String>,
    /// Events seen while waiting for answers (their `method`s), for `wait_for_event`.
    events: Vec<String>,
}

impl Browser {
    /// Starts headless Chromium `width` × `height` and opens one blank page.
    pub async fn start(program: &str, width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let process = tokio::process::Command::new(program)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                &format!("--user-data-dir={}", profile.path().display()),
                &format!("--window-size={width},{height}"),
                "about:blank",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("Chromium starts");
        let endpoint = active_port(profile.path()).await;
        let (socket, _) = tokio_tungstenite::connect_async(endpoint.as_str())
            .await
            .expect("the DevTools socket opens");
        let mut browser = Browser {
            _process: process,
            _profile: profile,
            socket,
            session: String::new(),
            next_id: 0,
            problems: Vec::new(),
            events: Vec::new(),
        };
        let target = browser
            .call("Target.createTarget", json!({ "url": "about:blank" }))
            .await;
        let target_id = target["targetId"]
            .as_str()
            .expect("a target id")
            .to_string();
        let attached = browser
            .call(
                "Target.attachToTarget",
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await;
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            browser.call(domain, json!({})).await;
        }
        browser
            .call(
                "Emulation.setDeviceMetricsOverride",
                json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
            )
            .await;
        browser
    }

    /// Sends one command (to the page's session once attached) and waits for its answer,
    /// noting the events that arrive meanwhile.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = Value::String(self.session.clone());
        }
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .expect("a DevTools command is sent");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let next = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("{method}: no answer within a minute"));
            let Some(Ok(Message::Text(text))) = next else {
                continue;
            };
            let value: Value = serde_json::from_str(text.as_str()).expect("DevTools JSON");
            if value["id"].as_u64() == Some(id) {
                if let Some(error) = value.get("error") {
                    panic!("{method} failed: {error}");
                }
                return value["result"].clone();
            }
            self.note(&value);
        }
    }

    /// Notes an event: a problem the console shows, or just that it happened.
    fn note(&mut self, event: &Value) {
        let Some(method) = event["method"].as_str() else {
            return;
        };
        let params = &event["params"];
        match method {
            "Runtime.exceptionThrown" => self
                .problems
                .push(format!("exception: {}", params["exceptionDetails"])),
            "Runtime.consoleAPICalled" if params["type"] == "error" => self
                .problems
                .push(format!("console.error: {}", params["args"])),
            "Log.entryAdded" if params["entry"]["level"] == "error" => self.problems.push(format!(
                "{} ({}): {}",
                params["entry"]["source"], params["entry"]["url"], params["entry"]["text"]
            )),
            _ => {}
        }
        self.events.push(method.to_string());
    }

    /// Waits until an event `method` arrives (or has arrived since the last wait).
    pub async fn wait_for_event(&mut self, method: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(at) = self.events.iter().position(|e| e == method) {
                self.events.drain(..=at);
                return;
            }
            let next = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("no {method} within a minute"));
            if let Some(Ok(Message::Text(text))) = next {
                let value: Value = serde_json::from_str(text.as_str()).expect("DevTools JSON");
                self.note(&value);
            }
        }
    }

    /// Forgets the events seen so far (before an action whose event is awaited).
    pub fn events_clear(&mut self) {
        self.events.clear();
    }

    /// Opens `url` and waits for its load event.
    pub async fn navigate(&mut self, url: &str) {
        self.events.clear();
        self.call("Page.navigate", json!({ "url": url })).await;
        self.wait_for_event("Page.loadEventFired").await;
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await;
        if let Some(details) = result.get("exceptionDetails") {
            panic!("`{expression}` threw: {details}");
        }
        result["result"]["value"].clone()
    }

    /// Polls `condition` (a script expression) until it is true, for up to `limit`.
    pub async fn wait_until(&mut self, condition: &str, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if self.eval(condition).await == Value::Bool(true) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// A PNG of the whole page, written to `to`.
    pub async fn screenshot(&mut self, to: &Path) {
        use base64::Engine;
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({ "format": "png", "captureBeyondViewport": true }),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        std::fs::write(to, png).expect("the screenshot is written");
    }
}

/// The browser's DevTools WebSocket, from the `DevToolsActivePort` file Chromium writes into
/// its profile once it listens (its port, then the browser's path).
async fn active_port(profile: &Path) -> String {
    let file: PathBuf = profile.join("DevToolsActivePort");
    for _ in 0..600 {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                return format!("ws://127.0.0.1:{port}{path}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("Chromium did not open its debugging port within a minute");
}
