//! The server's TCP segments, summed over its established connections: what the soak
//! charts per tick, because the segments the protocol makes the OS kernel move set the
//! server's system CPU.
//!
//! The figures come from the kernel's own per-socket counters (`tcp_info`'s `segs_out`,
//! `data_segs_out`, `segs_in`, `data_segs_in`) as iproute2's `ss -ti` prints them, for the
//! sockets whose local port is the server's. Machine-wide counters (`/proc/net/snmp`)
//! would mix in the bots' own segments when they run on the same machine. A segment out
//! that carries no data is a pure ACK.

/// Segment counters summed over a server's connections at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segments {
    pub connections: u64,
    pub out_total: u64,
    pub out_data: u64,
    pub in_total: u64,
    pub in_data: u64,
}

impl Segments {
    /// Sums the counters of every connection in `ss -tinH` output.
    pub fn parse(ss_output: &str) -> Segments {
        let mut s = Segments::default();
        for token in ss_output.split_whitespace() {
            let Some((name, value)) = token.split_once(':') else {
                continue;
            };
            let Ok(v) = value.parse::<u64>() else {
                continue;
            };
            match name {
                "segs_out" => {
                    s.out_total += v;
                    s.connections += 1;
                }
                "data_segs_out" => s.out_data += v,
                "segs_in" => s.in_total += v,
                "data_segs_in" => s.in_data += v,
                _ => {}
            }
        }
        s
    }

    /// The counters now, for the server listening on `port` (`None`: `ss` is missing or
    /// failed; the soak then charts no segments).
    pub async fn read(port: u16) -> Option<Segments> {
        let filter = format!("( sport = :{port} )");
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("ss")
                .args(["-tinH", "state", "established", &filter])
                .output()
        })
        .await
        .ok()?
        .ok()?;
        out.status
            .success()
            .then(|| Segments::parse(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// Segments per tick between two readings, as (out, of which pure ACKs, in); `None` when
/// a counter went back (a connection closed in between) or no tick passed.
pub fn per_tick(now: Segments, then: Segments, ticks: f64) -> Option<(f64, f64, f64)> {
    let out = now.out_total.checked_sub(then.out_total)?;
    let out_data = now.out_data.checked_sub(then.out_data)?;
    let inn = now.in_total.checked_sub(then.in_total)?;
    (ticks > 0.0 && now.connections == then.connections && out >= out_data).then(|| {
        (
            out as f64 / ticks,
            (out - out_data) as f64 / ticks,
            inn as f64 / ticks,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_connection_of_ss_output() {
        let out = "\
ESTAB 0 0 127.0.0.1:7000 127.0.0.1:50002
\t cubic wscale:7,7 rto:201 rtt:0.05/0.02 mss:32768 cwnd:10 bytes_sent:900 segs_out:30 segs_in:25 data_segs_out:20 data_segs_in:24 send 52.4Gbps
ESTAB 0 0 127.0.0.1:7000 127.0.0.1:50004
\t cubic wscale:7,7 rto:201 segs_out:5 segs_in:4 data_segs_out:5 data_segs_in:3 lastack:8
";
        let s = Segments::parse(out);
        assert_eq!(
            s,
            Segments {
                connections: 2,
                out_total: 35,
                out_data: 25,
                in_total: 29,
                in_data: 27
            }
        );
        let later = Segments {
            out_total: 35 + 600,
            out_data: 25 + 400,
            in_total: 29 + 300,
            ..s
        };
        assert_eq!(per_tick(later, s, 100.0), Some((6.0, 2.0, 3.0)));
        let fewer = Segments {
            connections: 1,
            ..later
        };
        assert_eq!(per_tick(fewer, s, 100.0), None, "a connection closed in between");
        assert_eq!(per_tick(s, later, 100.0), None, "counters went back");
    }
}
