//! The runtime's leg of a proxied stream, read in fewer, larger pieces while it runs
//! in bulk.
//!
//! containerd sends an exec's output in the pieces its copy from the shim's FIFO
//! returns, about 8 KB each at 80 MB/s on the bench machine. Read as they come, every
//! piece cost oxlet a wake-up, a read, a TLS record and a write, and the client a
//! wake-up of its own: thousands a second, on the same two cores as the runtime.
//! When small pieces come back to back, the next read waits a moment, so what arrives
//! meanwhile is read, encrypted and sent at once. A piece is never held back: the
//! wait is before the read after it. An interactive stream (a shell's keystrokes and
//! echoes, far apart) and a stream already coming in large pieces are never paused.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A piece this small is worth waiting after, if another came just before it.
/// Half the runtime's own copy buffer (Go's 32 KiB): a port-forward's pieces come
/// near that size, and pausing after them capped its throughput (at 64 KiB here,
/// 0.77 × the direct stream).
const SMALL_PIECE: usize = 16 * 1024;
/// Pieces this close together are a bulk stream.
const BACK_TO_BACK: Duration = Duration::from_millis(1);
/// The wait before the next read (tokio's timer rounds it up to its 1 ms tick).
const PAUSE: Duration = Duration::from_micros(500);

/// A stream whose reads pause briefly in bulk (see the module doc); writes pass
/// through.
pub(super) struct Paced<S> {
    inner: S,
    /// When the last read that returned bytes ended.
    last_piece: Option<Instant>,
    pause: Option<Pin<Box<Sleep>>>,
}

impl<S> Paced<S> {
    pub(super) fn new(inner: S) -> Paced<S> {
        Paced {
            inner,
            last_piece: None,
            pause: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Paced<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(pause) = self.pause.as_mut() {
            ready!(pause.as_mut().poll(cx));
            self.pause = None;
        }
        let before = buf.filled().len();
        let result = ready!(Pin::new(&mut self.inner).poll_read(cx, buf));
        let n = buf.filled().len() - before;
        if result.is_ok() && n > 0 {
            let now = Instant::now();
            let bulk = self
                .last_piece
                .is_some_and(|last| now.duration_since(last) < BACK_TO_BACK);
            if bulk && n < SMALL_PIECE {
                self.pause = Some(Box::pin(tokio::time::sleep(PAUSE)));
            }
            self.last_piece = Some(now);
        }
        Poll::Ready(result)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Paced<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    super::conn::passed_through_write_tail!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Reads what is there once, through `paced`, timing the read.
    async fn read_once<S: AsyncRead + Unpin>(paced: &mut Paced<S>) -> (usize, Duration) {
        let mut buf = vec![0u8; 256 * 1024];
        let t = std::time::Instant::now();
        let n = paced.read(&mut buf).await.unwrap();
        (n, t.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn small_pieces_back_to_back_are_read_together_after_a_pause() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut paced = Paced::new(rx);
        tx.write_all(&[1; 1000]).await.unwrap();
        assert_eq!(
            read_once(&mut paced).await.0,
            1000,
            "the first piece at once"
        );
        tx.write_all(&[2; 1000]).await.unwrap();
        assert_eq!(
            read_once(&mut paced).await.0,
            1000,
            "a second piece at once"
        );
        // Back to back and small: the next read waits, so the three pieces written
        // meanwhile come as one.
        for _ in 0..3 {
            tx.write_all(&[3; 1000]).await.unwrap();
        }
        let started = Instant::now();
        let (n, _) = read_once(&mut paced).await;
        assert_eq!(n, 3000);
        assert!(started.elapsed() >= PAUSE, "it paused first");
    }

    #[tokio::test(start_paused = true)]
    async fn pieces_far_apart_and_large_pieces_are_never_paused() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut paced = Paced::new(rx);
        for _ in 0..3 {
            tx.write_all(b"x").await.unwrap();
            let started = Instant::now();
            assert_eq!(read_once(&mut paced).await.0, 1);
            assert_eq!(
                started.elapsed(),
                Duration::ZERO,
                "a keystroke passes at once"
            );
            tokio::time::advance(Duration::from_millis(5)).await;
        }
        for _ in 0..3 {
            tx.write_all(&vec![7; SMALL_PIECE]).await.unwrap();
            let started = Instant::now();
            assert_eq!(read_once(&mut paced).await.0, SMALL_PIECE);
            assert_eq!(
                started.elapsed(),
                Duration::ZERO,
                "a large piece is not waited after"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_a_stream_is_read_after_a_pause_too() {
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut paced = Paced::new(rx);
        tx.write_all(&[1; 10]).await.unwrap();
        read_once(&mut paced).await;
        tx.write_all(&[1; 10]).await.unwrap();
        read_once(&mut paced).await;
        drop(tx);
        assert_eq!(read_once(&mut paced).await.0, 0, "end of stream");
    }
}
