//! A gRPC service written by hand, without protobuf or code generation: `/demo.Vendor/Card`
//! takes a card id as a UTF-8 string and answers what the vendor is told to answer (a card, or
//! a status with an optional `grpc-retry-pushback-ms`). It runs on a real tonic server on a
//! loopback port, and [`card`] calls it through any tower service a tonic client can use (a
//! `Channel`, or a `Channel` behind layers). Used by the `grpc_client` example and the gRPC
//! tests.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

/// Messages are UTF-8 strings.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Utf8;

impl Codec for Utf8 {
    type Encode = String;
    type Decode = String;
    type Encoder = Utf8;
    type Decoder = Utf8;
    fn encoder(&mut self) -> Utf8 {
        Utf8
    }
    fn decoder(&mut self) -> Utf8 {
        Utf8
    }
}

impl Encoder for Utf8 {
    type Item = String;
    type Error = Status;
    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for Utf8 {
    type Item = String;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}

/// What the vendor answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The card.
    Card,
    /// This status, with this pushback header value if any.
    Fail(Code, Option<&'static str>),
    /// Nothing, ever: the call hangs.
    Hang,
}

/// The vendor's switch and its call counter; clones share them.
#[derive(Clone, Debug)]
pub(crate) struct Vendor {
    answer: Arc<Mutex<Answer>>,
    calls: Arc<AtomicU64>,
}

impl Vendor {
    /// A healthy vendor.
    pub(crate) fn new() -> Self {
        Self {
            answer: Arc::new(Mutex::new(Answer::Card)),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// From now on, answer `answer`.
    pub(crate) fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    /// Calls that reached the vendor.
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn answer(&self, id: String) -> Option<Result<tonic::Response<String>, Status>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Some(match self.answer.lock().unwrap().clone() {
            Answer::Hang => return None,
            Answer::Card => Ok(tonic::Response::new(format!("card {id}"))),
            Answer::Fail(code, pushback) => {
                let mut status = Status::new(code, format!("vendor says {code:?}"));
                if let Some(p) = pushback {
                    status
                        .metadata_mut()
                        .insert("grpc-retry-pushback-ms", p.parse().unwrap());
                }
                Err(status)
            }
        })
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The server side: `demo.Vendor` with one unary method, `Card`.
#[derive(Clone, Debug)]
struct VendorServer(Vendor);

impl tonic::server::NamedService for VendorServer {
    const NAME: &'static str = "demo.Vendor";
}

struct CardMethod(Vendor);

impl tonic::server::UnaryService<String> for CardMethod {
    type Response = String;
    type Future = BoxFuture<Result<tonic::Response<String>, Status>>;
    fn call(&mut self, request: tonic::Request<String>) -> Self::Future {
        let answer = self.0.answer(request.into_inner());
        Box::pin(async move {
            match answer {
                Some(a) => a,
                None => std::future::pending().await,
            }
        })
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for VendorServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let vendor = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != "/demo.Vendor/Card" {
                return Ok(Status::unimplemented(req.uri().path().to_string()).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(Utf8);
            Ok(grpc.unary(CardMethod(vendor), req).await)
        })
    }
}

/// Serves `vendor` on a free loopback port until the runtime stops; returns the address.
pub(crate) async fn serve(vendor: Vendor) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(VendorServer(vendor))
            .serve_with_incoming(incoming),
    );
    addr
}

/// Asks for card `id` through `service` (a `Channel`, or a `Channel` behind layers).
pub(crate) async fn card<S>(service: S, id: &str) -> Result<tonic::Response<String>, Status>
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::Error: Into<tripline_policies::BoxError>,
    S::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<tripline_policies::BoxError> + Send,
{
    let mut client = tonic::client::Grpc::new(service);
    client
        .ready()
        .await
        .map_err(|e| Status::unknown(format!("not ready: {}", e.into())))?;
    let path = http::uri::PathAndQuery::from_static("/demo.Vendor/Card");
    client
        .unary(tonic::Request::new(id.to_string()), path, Utf8)
        .await
}
