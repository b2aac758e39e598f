//! # loopguard-mcp
//!
//! A stdio MCP proxy with the loopguard engine in front of the server's tools. The MCP
//! client starts the proxy in place of the server (`loopguard mcp-proxy -- SERVER ARGS…`);
//! the proxy starts the real server and passes every message through unchanged, except
//! `tools/call`:
//!
//! - before a call is forwarded the engine gives its verdict; a **blocked** call never
//!   reaches the server: the proxy answers it with a tool result (`isError: true`) whose
//!   text is the loop message, so the model reads why;
//! - a **warned** call is forwarded, and the warning is appended to its result as a text
//!   block;
//! - every result is recorded as the call's outcome ([`outcome`] says how a
//!   `CallToolResult` becomes one).
//!
//! Notifications, cancellations, progress, batches and server-initiated requests pass
//! through untouched. [`relay`] makes these decisions without I/O; [`proxy`] runs the
//! server and the threads around it; [`framing`] reads the newline-delimited messages of
//! the MCP stdio transport.
//!
//! ```
//! use loopguard::ConfigSet;
//! use loopguard_mcp::relay::Relay;
//!
//! let mut relay = Relay::new(ConfigSet::enabled_defaults(), "session-1".into(), None);
//! let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"path":"/x"}}}"#;
//! let decided = relay.from_client(call);
//! assert_eq!(decided.to_server, vec![call.to_vec()]); // forwarded unchanged
//! assert!(decided.to_client.is_empty());
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod framing;
mod large;
pub mod outcome;
pub mod proxy;
pub mod relay;

pub use proxy::{run, ProxyError, ProxyExit, ProxyOptions, DEFAULT_MAX_LINE_BYTES};
pub use relay::Relay;
