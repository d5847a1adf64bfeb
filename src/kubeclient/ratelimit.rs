//! client-go's token-bucket rate limiter (`kubeAPIQPS`/`kubeAPIBurst`) as a tower
//! layer under the kube client, so every request through any `Api` waits its turn.
//!
//! The bucket starts full (`burst` requests go at once) and refills at `qps` tokens per
//! second up to `burst`, like `flowcontrol.NewTokenBucketRateLimiter`. The wait happens
//! in `poll_ready`: kube's client sits behind a `Buffer` whose worker polls readiness
//! before each request, so requests are admitted one by one, in order.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// client-go's `DefaultQPS` / `DefaultBurst`, used when a rest config says 0.
const CLIENT_GO_DEFAULT_QPS: f64 = 5.0;
const CLIENT_GO_DEFAULT_BURST: u32 = 10;

/// A token bucket: `burst` tokens, refilled at `qps` per second.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A 0 `qps` or `burst` takes client-go's defaults (5 and 10), as
    /// `rest.RESTClientFor` does.
    pub(crate) fn new(qps: u32, burst: u32) -> TokenBucket {
        let qps = if qps == 0 {
            CLIENT_GO_DEFAULT_QPS
        } else {
            f64::from(qps)
        };
        let burst = f64::from(if burst == 0 {
            CLIENT_GO_DEFAULT_BURST
        } else {
            burst
        });
        TokenBucket {
            qps,
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes a token if one is there; otherwise how long until one will be.
    pub(crate) fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// Limits the wrapped service to a [`TokenBucket`]'s rate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateLimitLayer {
    qps: u32,
    burst: u32,
}

impl RateLimitLayer {
    pub(crate) fn new(qps: u32, burst: u32) -> RateLimitLayer {
        RateLimitLayer { qps, burst }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: TokenBucket::new(self.qps, self.burst),
            sleep: None,
            granted: false,
        }
    }
}

/// See [`RateLimitLayer`].
pub(crate) struct RateLimit<S> {
    inner: S,
    bucket: TokenBucket,
    /// The wait for the next token, while there is one.
    sleep: Option<Pin<Box<Sleep>>>,
    /// A token is held for the next `call`.
    granted: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.granted {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            match self.bucket.try_take(Instant::now()) {
                Ok(()) => self.granted = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        // tower's contract: `call` only after `poll_ready` said ready, which took the token.
        self.granted = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket starts full, then refills at qps: 1 + 4 tokens at qps 2 take 2 s.
    #[tokio::test(start_paused = true)]
    async fn burst_then_qps() {
        let start = Instant::now();
        let mut b = TokenBucket::new(2, 1);
        assert_eq!(b.try_take(start), Ok(()));
        assert_eq!(b.try_take(start), Err(Duration::from_millis(500)));
        let mut now = start;
        for _ in 0..4 {
            loop {
                match b.try_take(now) {
                    Ok(()) => break,
                    Err(wait) => now += wait,
                }
            }
        }
        assert_eq!(now - start, Duration::from_secs(2));
        // An idle bucket fills up to burst, not beyond.
        let mut b = TokenBucket::new(10, 3);
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.try_take(later), Ok(()));
        }
        assert!(b.try_take(later).is_err());
    }

    /// 0 means client-go's defaults: 10 at once, then 5 per second.
    #[tokio::test(start_paused = true)]
    async fn zero_takes_client_go_defaults() {
        let now = Instant::now();
        let mut b = TokenBucket::new(0, 0);
        for _ in 0..10 {
            assert_eq!(b.try_take(now), Ok(()));
        }
        assert_eq!(b.try_take(now), Err(Duration::from_millis(200)));
    }

    /// Through the layer: with qps 4 and burst 2, six calls need four refills (1 s).
    #[tokio::test(start_paused = true)]
    async fn layer_paces_calls() {
        use tower::ServiceExt as _;
        let svc =
            tower::service_fn(|()| async { Ok::<_, std::convert::Infallible>(Instant::now()) });
        let mut svc = RateLimitLayer::new(4, 2).layer(svc);
        let start = Instant::now();
        let mut times = Vec::new();
        for _ in 0..6 {
            times.push(svc.ready().await.unwrap().call(()).await.unwrap() - start);
        }
        let ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 0, 250, 500, 750, 1000]);
    }
}
