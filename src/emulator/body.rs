//! The emulator's response body: a whole JSON document, or a stream of watch event chunks.
//! Implements `http_body::Body` so the same responses serve kube-rs in-process and hyper on
//! loopback.

use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::stream::BoxStream;
use http_body::{Frame, SizeHint};

/// A response body.
pub enum EmulatorBody {
    Full(Option<Bytes>),
    Stream(BoxStream<'static, Bytes>),
}

impl fmt::Debug for EmulatorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(bytes) => f
                .debug_tuple("Full")
                .field(&bytes.as_ref().map_or(0, Bytes::len))
                .finish(),
            Self::Stream(_) => f.write_str("Stream"),
        }
    }
}

impl EmulatorBody {
    #[must_use]
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        Self::Full(Some(bytes.into()))
    }

    #[must_use]
    pub fn empty() -> Self {
        Self::Full(None)
    }
}

impl http_body::Body for EmulatorBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.get_mut() {
            Self::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Self::Stream(stream) => stream
                .as_mut()
                .poll_next(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Self::Full(None) => SizeHint::with_exact(0),
            Self::Stream(_) => SizeHint::default(),
        }
    }
}
