//! A WebSocket client on a plain socket (RFC 6455, unfragmented frames only): enough to
//! subscribe and to see the server's pings, and to choose whether to answer them, which a
//! client library does on its own.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use serde_json::{Value, json};

/// A frame's opcode: text.
pub const TEXT: u8 = 0x1;
/// A frame's opcode: the peer closes.
pub const CLOSE: u8 = 0x8;
/// A frame's opcode: ping.
pub const PING: u8 = 0x9;
/// A frame's opcode: pong.
pub const PONG: u8 = 0xA;

/// One WebSocket connection.
pub struct WebSocket {
    stream: TcpStream,
    next_id: u64,
}

impl WebSocket {
    /// Connects to `addr` and upgrades; reads wait at most `timeout`.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Self {
        let mut stream = TcpStream::connect(addr).expect("connects");
        stream.set_read_timeout(Some(timeout)).expect("a timeout");
        let request = format!(
            "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).expect("writes");
        // Byte by byte, so nothing after the handshake is read with it.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0];
            stream.read_exact(&mut byte).expect("a handshake answer");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "not upgraded: {head}");
        Self { stream, next_id: 1 }
    }

    /// Sends one frame of `opcode` with `payload`, masked as a client must.
    pub fn send(&mut self, opcode: u8, payload: &[u8]) {
        let mut frame = vec![0x80 | opcode];
        match payload.len() {
            len @ 0..=125 => frame.push(0x80 | len as u8),
            len @ 126..=0xFFFF => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(len as u16).to_be_bytes());
            }
            len => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        let mask = [0x5A, 0xC3, 0x1F, 0x77];
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
        self.stream.write_all(&frame).expect("writes");
    }

    /// Sends a JSON-RPC call; returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(TEXT, request.to_string().as_bytes());
        id
    }

    /// The next frame, its opcode and payload; `None` once the connection is closed (end
    /// of stream, a reset, or a close frame) or when nothing came within the timeout.
    pub fn frame(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut head = [0; 2];
        self.stream.read_exact(&mut head).ok()?;
        let len = match head[1] & 0x7F {
            126 => {
                let mut len = [0; 2];
                self.stream.read_exact(&mut len).ok()?;
                u64::from(u16::from_be_bytes(len))
            }
            127 => {
                let mut len = [0; 8];
                self.stream.read_exact(&mut len).ok()?;
                u64::from_be_bytes(len)
            }
            len => u64::from(len),
        };
        let mut payload = vec![0; usize::try_from(len).expect("a frame that fits")];
        self.stream.read_exact(&mut payload).ok()?;
        let opcode = head[0] & 0x0F;
        (opcode != CLOSE).then_some((opcode, payload))
    }

    /// The next JSON message (answering pings on the way); `None` as [`WebSocket::frame`].
    pub fn message(&mut self) -> Option<Value> {
        loop {
            let (opcode, payload) = self.frame()?;
            match opcode {
                PING => self.send(PONG, &payload),
                TEXT => return Some(serde_json::from_slice(&payload).expect("JSON")),
                _ => {}
            }
        }
    }

    /// The answer to call `id`; notifications before it are skipped.
    pub fn answer(&mut self, id: u64) -> Value {
        loop {
            let message = self.message().expect("an answer");
            if message["id"] == json!(id) {
                return message;
            }
        }
    }
}
