//! A client's message rate limit: a token bucket over every message it sends, and the
//! close of a client that stays over it (the connection's `input_limits`).

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket over every message a client sends, with a per-second count of the
/// messages it had to drop.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    tokens: f64,
    rate_per_s: f64,
    burst: f64,
    last: Instant,
    window_start: Instant,
    excess_in_window: u32,
    close_after_excess: u32,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    Yes,
    /// Over the rate: drop this message.
    Drop,
    /// Over the rate for too long: close the client.
    Close,
}

impl RateLimiter {
    pub(crate) fn new(rate_per_s: f64, burst: u32, close_after_excess: u32) -> RateLimiter {
        let now = Instant::now();
        RateLimiter {
            tokens: burst as f64,
            rate_per_s,
            burst: burst as f64,
            last: now,
            window_start: now,
            excess_in_window: 0,
            close_after_excess,
        }
    }

    pub(crate) fn admit(&mut self, now: Instant) -> Admit {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate_per_s).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Admit::Yes;
        }
        if now.saturating_duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            self.excess_in_window = 0;
        }
        self.excess_in_window += 1;
        if self.excess_in_window > self.close_after_excess {
            Admit::Close
        } else {
            Admit::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_drops_then_closes() {
        let mut r = RateLimiter::new(10.0, 5, 20);
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(r.admit(t0), Admit::Yes);
        }
        for _ in 0..20 {
            assert_eq!(r.admit(t0), Admit::Drop);
        }
        assert_eq!(r.admit(t0), Admit::Close);
        // A second later the bucket has refilled and the window restarted.
        let mut r = RateLimiter::new(10.0, 5, 20);
        for _ in 0..25 {
            r.admit(t0);
        }
        let t1 = t0 + Duration::from_millis(1100);
        assert_eq!(r.admit(t1), Admit::Yes);
    }
}
