//! A gRPC service on tonic limited the ways a service behind a load balancer needs (feature
//! `tonic`), the same rules as `axum_server.rs`, and a client that shows the answers.
//!
//! ```text
//! cargo run -p ratelimit-examples --features tonic --example grpc_server
//! SERVE=1 cargo run -p ratelimit-examples --features tonic --example grpc_server   # keep serving
//! ```
//!
//! - **Every client**, counted from the right of the `x-forwarded-for` metadata behind one
//!   trusted proxy (the load balancer): 100 calls a minute over every method.
//! - **Per method**: 20 a minute per client on each method (`per_method`: a method no service
//!   has shares one budget with every other), and on `orders.Orders/Login` also, stacked, 3 a
//!   minute against bursts and 10 an hour, decided as one (a refusal by one spends nothing from
//!   the other).
//! - **`orders.Orders/Me`**: per user and by the user's plan (tiers `free` and `pro`), an
//!   annotated fn returning `Result<_, Status>`: its refusal converts by `?`.
//! - A refusal is `RESOURCE_EXHAUSTED` with the wait as a `google.rpc.RetryInfo` detail and
//!   the rate-limit fields as metadata; a store that cannot decide is `UNAVAILABLE`.
//!
//! The service is written without generated code (its messages derive `prost::Message`, and it
//! dispatches on the method's path as tonic's generated servers do), so the example needs no
//! `protoc`. `ADDR` changes the address (default `127.0.0.1:50051`).

use std::convert::Infallible;
use std::task::{Context, Poll};

use ratelimit::http::{ClientIp, RateLimitLayer, TrustedProxies};
use ratelimit::{rate_limit, Module, Options, Tier};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use tonic_types::StatusExt;

#[derive(Clone, PartialEq, prost::Message)]
struct GetOrder {
    #[prost(uint64, tag = "1")]
    id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Reply {
    #[prost(string, tag = "1")]
    text: String,
}

/// `orders.Orders`: three unary methods.
#[derive(Clone)]
struct Orders;

impl NamedService for Orders {
    const NAME: &'static str = "orders.Orders";
}

const GET: &str = "/orders.Orders/Get";
const LOGIN: &str = "/orders.Orders/Login";
const ME: &str = "/orders.Orders/Me";

/// One unary method: a fn from the request to the reply.
struct Unary<M>(fn(Request<M>) -> BoxFuture<Response<Reply>, Status>);

impl<M> UnaryService<M> for Unary<M> {
    type Response = Reply;
    type Future = BoxFuture<Response<Reply>, Status>;

    fn call(&mut self, request: Request<M>) -> Self::Future {
        (self.0)(request)
    }
}

impl Service<http::Request<tonic::body::Body>> for Orders {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            // A codec per method: each decodes its own request message.
            let response = match request.uri().path() {
                GET => {
                    Grpc::new(ProstCodec::default())
                        .unary(Unary(get), request)
                        .await
                }
                LOGIN => {
                    Grpc::new(ProstCodec::default())
                        .unary(Unary(login), request)
                        .await
                }
                ME => {
                    Grpc::new(ProstCodec::default())
                        .unary(Unary(signed_in), request)
                        .await
                }
                _ => Status::unimplemented("no such method").into_http(),
            };
            Ok(response)
        })
    }
}

fn get(request: Request<GetOrder>) -> BoxFuture<Response<Reply>, Status> {
    let id = request.into_inner().id;
    Box::pin(async move { Ok(reply(format!("order {id}"))) })
}

fn login(_: Request<()>) -> BoxFuture<Response<Reply>, Status> {
    Box::pin(async { Ok(reply("welcome".into())) })
}

fn signed_in(request: Request<()>) -> BoxFuture<Response<Reply>, Status> {
    let authorization = request.metadata().get("authorization");
    let (user, plan) = ratelimit_examples::user(authorization.and_then(|v| v.to_str().ok()));
    Box::pin(async move { Ok(reply(me(user, plan).await?)) })
}

fn reply(text: String) -> Response<Reply> {
    Response::new(Reply { text })
}

/// Per user, under the user's plan: a refusal is `Err(Status)` through `?`
/// (`From<ratelimit::Error> for tonic::Status`).
#[rate_limit(key = user, tier = plan)]
async fn me(user: String, plan: &'static str) -> Result<String, Status> {
    Ok(format!("{user} on the {plan} plan"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _module = Module::builder()
        .tier(Tier::new("free", 5).window("1m"))
        .tier(Tier::new("pro", 50).window("1m"))
        .init()?;

    let client = || ClientIp::x_forwarded_for(TrustedProxies::count(1));
    let per_minute = |n| Options::new().limit(n).window("1m");
    // Every client, over every method; then per method (unlisted methods share one budget).
    let everything = RateLimitLayer::from_module(client())
        .options(per_minute(100).budget("grpc-all"))
        .grpc();
    let per_method = RateLimitLayer::from_module(client())
        .options(per_minute(20).budget("grpc-method"))
        .per_method([GET, LOGIN, ME])
        .grpc();
    let login = RateLimitLayer::from_module(client())
        .limit(per_minute(3).budget("login-burst"))
        .limit(Options::new().limit(10).window("1h").budget("login-hourly"))
        .skip(|head| head.uri.path() != LOGIN)
        .grpc();

    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:50051".into());
    // Bound before the client connects: no race with the server's start.
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let server = Server::builder()
        .layer(everything)
        .layer(per_method)
        .layer(login)
        .add_service(Orders)
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    let serving = tokio::spawn(server);
    println!("serving orders.Orders on {addr}");

    demo(&addr).await?;
    if std::env::var_os("SERVE").is_some() {
        serving.await??;
    }
    Ok(())
}

/// The client: `Login` five times as one client (the burst limit refuses the fourth), `Get`
/// as another, and `Me` as a free user past its plan (5 a minute).
async fn demo(addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut grpc = tonic::client::Grpc::new(channel);
    for _ in 0..5 {
        call(&mut grpc, LOGIN, 0, ("x-forwarded-for", "203.0.113.9")).await;
    }
    call(&mut grpc, GET, 7, ("x-forwarded-for", "203.0.113.10")).await;
    for _ in 0..6 {
        call(&mut grpc, ME, 0, ("authorization", "Bearer free-user-1")).await;
    }
    Ok(())
}

/// One call of `path` (with order `id`, for `Get`) with one metadata entry, and what came of it.
async fn call(
    grpc: &mut tonic::client::Grpc<Channel>,
    path: &'static str,
    id: u64,
    (name, value): (&'static str, &'static str),
) {
    grpc.ready().await.expect("channel ready");
    let mut request = Request::new(GetOrder { id });
    request
        .metadata_mut()
        .insert(name, value.parse().expect("ASCII"));
    let codec = ProstCodec::<GetOrder, Reply>::default();
    let answer = grpc
        .unary(request, PathAndQuery::from_static(path), codec)
        .await;
    match answer {
        Ok(reply) => {
            let remaining = reply.metadata().get("x-ratelimit-remaining").cloned();
            let text = reply.into_inner().text;
            println!("{path}: OK {text:?}, remaining {remaining:?}");
        }
        Err(status) => {
            let retry = status.get_details_retry_info().and_then(|r| r.retry_delay);
            let after = status.metadata().get("retry-after").cloned();
            let (code, message) = (status.code(), status.message());
            println!("{path}: {code:?} {message}, RetryInfo {retry:?}, retry-after {after:?}");
        }
    }
}
