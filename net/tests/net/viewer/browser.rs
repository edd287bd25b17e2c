//! The live viewer in Debian's Chromium, driven by playwright-core (`viewer/test/browser.mjs`).

use std::path::PathBuf;
use std::process::Command;

use super::{ensure_npm_packages, viewer_dir};

/// The live viewer in Debian's Chromium: the page loads without console errors, draws the
/// terrain and the entities in view, steering moves the avatar, the HUD counts, and a
/// close by the server is shown with its reason. Screenshots go to
/// `target/tmp/viewer-screenshots/`.
#[test]
fn the_live_viewer_plays_in_a_real_browser() {
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser tests need Debian's chromium at /usr/bin/chromium (.ci/run installs it)"
    );
    ensure_npm_packages();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("viewer-screenshots");
    let rt = crate::common::runtime();
    rt.block_on(async {
        let handle = crate::common::start(crate::common::small_config()).await;
        let url = format!("http://{}/", handle.local_addr());
        let mut child = Command::new("node")
            .arg(viewer_dir().join("test/browser.mjs"))
            .arg(&url)
            .arg(&out_dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("node");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut log = Vec::new();
        let mut handle = Some(handle);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            match rx.try_recv() {
                Ok(line) => {
                    if line == "close-now" {
                        if let Some(h) = handle.take() {
                            h.shutdown().await.expect("shutdown");
                        }
                    }
                    log.push(line);
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the browser test hung:\n{}",
                        log.join("\n")
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
            }
        }
        let result = child.wait_with_output().expect("node exits");
        assert!(
            result.status.success(),
            "the browser test failed:\n{}\n{}",
            log.join("\n"),
            String::from_utf8_lossy(&result.stderr)
        );
        if let Some(h) = handle.take() {
            let _ = h.shutdown().await;
        }
    });
}

/// The live viewer in Chromium keeps its avatar when its world moves: the server stops for
/// a move (the page is closed with 4001) and the world is resumed from its recording on
/// the same address; the page reconnects by itself and reclaims with its token
/// (`viewer/test/reclaim.mjs`).
#[test]
fn the_live_viewer_takes_its_avatar_back_after_a_move() {
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser tests need Debian's chromium at /usr/bin/chromium (.ci/run installs it)"
    );
    ensure_npm_packages();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("viewer-screenshots");
    let dir = crate::common::TempDir::new("viewer-move");
    let rt = crate::common::runtime();
    rt.block_on(async {
        let mut config = crate::common::small_config();
        config.server.recording.enabled = true;
        config.server.recording.dir = dir.path().to_path_buf();
        let first = crate::common::start(config.clone()).await;
        let addr = first.local_addr();
        let recording = first.recording_path().expect("recorded").to_path_buf();
        let mut child = Command::new("node")
            .arg(viewer_dir().join("test/reclaim.mjs"))
            .arg(format!("http://{addr}/"))
            .arg(&out_dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("node");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut log = Vec::new();
        let mut first = Some(first);
        let mut second = None;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            match rx.try_recv() {
                Ok(line) => {
                    if line == "move-now" {
                        if let Some(h) = first.take() {
                            h.stopper().stop_moving();
                            h.wait().await.expect("the first server stops");
                            // The world again, from its recording, where the page knows it.
                            config.server.listen = addr.to_string();
                            let options = migratory_server::ServeOptions {
                                resume_from: Some(recording.clone()),
                                ..Default::default()
                            };
                            second = Some(crate::common::start_with(config.clone(), options).await);
                        }
                    }
                    log.push(line);
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the browser test hung:\n{}",
                        log.join("\n")
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
            }
        }
        let result = child.wait_with_output().expect("node exits");
        assert!(
            result.status.success(),
            "the browser test failed:\n{}\n{}",
            log.join("\n"),
            String::from_utf8_lossy(&result.stderr)
        );
        let second = second.expect("the world was moved");
        assert_eq!(
            second
                .metrics()
                .reclaims_taken_total
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        let _ = second.shutdown().await;
    });
}
