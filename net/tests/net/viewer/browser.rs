//! The live viewer in Debian's Chromium, driven by playwright-core (`viewer/test/*.mjs`).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{ensure_npm_packages, viewer_dir};

/// Runs `viewer/test/SCRIPT URL OUT_DIR` in node; each line it prints goes to `on_line`
/// (a script asks the test to act on the server that way), and the script must exit 0.
async fn drive_browser(script: &str, url: &str, mut on_line: impl AsyncFnMut(&str)) {
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser tests need Debian's chromium at /usr/bin/chromium (.ci/run installs it)"
    );
    ensure_npm_packages();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("viewer-screenshots");
    let mut child = Command::new("node")
        .arg(viewer_dir().join("test").join(script))
        .arg(url)
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
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match rx.try_recv() {
            Ok(line) => {
                on_line(&line).await;
                log.push(line);
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                assert!(
                    Instant::now() < deadline,
                    "the browser test hung:\n{}",
                    log.join("\n")
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
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
}

/// The live viewer in Debian's Chromium: the page loads without console errors, draws the
/// terrain and the entities in view, steering moves the avatar, the HUD counts, and a
/// close by the server is shown with its reason. Screenshots go to
/// `target/tmp/viewer-screenshots/`.
#[test]
fn the_live_viewer_plays_in_a_real_browser() {
    let dir = crate::common::TempDir::new("viewer-live");
    let rt = crate::common::runtime();
    let recording = rt.block_on(async {
        let mut config = crate::common::small_config();
        config.server.recording.enabled = true;
        config.server.recording.dir = dir.path().to_path_buf();
        let handle = crate::common::start(config).await;
        let recording = handle.recording_path().expect("recorded").to_path_buf();
        let url = format!("http://{}/", handle.local_addr());
        let mut handle = Some(handle);
        drive_browser("browser.mjs", &url, async |line: &str| {
            if line == "close-now" {
                if let Some(h) = handle.take() {
                    h.shutdown().await.expect("shutdown");
                }
            }
        })
        .await;
        if let Some(h) = handle.take() {
            let _ = h.shutdown().await;
        }
        recording
    });
    // The bookmark the page made with B is in the recording, and the replay viewer
    // serves it for its timeline.
    let rec = migratory_replay::Recording::open(&recording).expect("recording");
    let marks = rec.bookmarks().expect("bookmarks");
    assert_eq!(
        marks.iter().map(|b| b.note.as_str()).collect::<Vec<_>>(),
        ["seen from the browser"],
        "{marks:?}"
    );
    rt.block_on(async {
        let view =
            migratory_replay::viewer::view(recording.clone(), "127.0.0.1:0".parse().expect("addr"), None)
                .await
                .expect("view");
        let (_, info) = crate::common::http_get(&view.local_addr.to_string(), "/replay/info")
            .await
            .expect("GET");
        let info: serde_json::Value = serde_json::from_str(&info).expect("JSON");
        assert_eq!(info["bookmarks"][0]["note"], "seen from the browser", "{info}");
        assert_eq!(info["bookmarks"][0]["tick"], marks[0].tick, "{info}");
        // In Chromium: the timeline's bookmarks lane holds it, and a click lands on its tick.
        let url = format!("http://{}/", view.local_addr);
        let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("viewer-screenshots");
        let node = tokio::task::spawn_blocking(move || {
            Command::new("node")
                .arg(viewer_dir().join("test/bookmark_lane.mjs"))
                .args([
                    url.as_str(),
                    &out_dir.display().to_string(),
                    "seen from the browser",
                ])
                .output()
                .expect("node")
        })
        .await
        .expect("join");
        let stdout = String::from_utf8_lossy(&node.stdout);
        assert!(
            node.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&node.stderr)
        );
        let line: serde_json::Value = stdout
            .lines()
            .find_map(|l| serde_json::from_str(l).ok())
            .expect("the lane's findings");
        assert_eq!(
            (&line["tick"], &line["shown"]),
            (&marks[0].tick.into(), &marks[0].tick.into()),
            "{line}"
        );
        view.task.abort();
    });
}

/// The live viewer in Chromium keeps its avatar when its world moves: the server stops for
/// a move (the page is closed with 4001) and the world is resumed from its recording on
/// the same address; the page reconnects by itself and reclaims with its token
/// (`viewer/test/reclaim.mjs`).
#[test]
fn the_live_viewer_takes_its_avatar_back_after_a_move() {
    let dir = crate::common::TempDir::new("viewer-move");
    let rt = crate::common::runtime();
    rt.block_on(async {
        let mut config = crate::common::small_config();
        config.server.recording.enabled = true;
        config.server.recording.dir = dir.path().to_path_buf();
        let first = crate::common::start(config.clone()).await;
        let addr = first.local_addr();
        let recording = first.recording_path().expect("recorded").to_path_buf();
        let mut first = Some(first);
        let mut second = None;
        drive_browser("reclaim.mjs", &format!("http://{addr}/"), async |line: &str| {
            if line != "move-now" {
                return;
            }
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
        })
        .await;
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
