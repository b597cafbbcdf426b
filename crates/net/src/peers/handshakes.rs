//! The slots of accepted connections still in their TLS handshake: before a peer has
//! proved who it is, all it may hold is one of a bounded number of slots (and a few per
//! IP address), each for at most the handshake timeout.

use std::{collections::HashMap, net::IpAddr, sync::Arc};

use parking_lot::Mutex;

/// Handshakes in progress, in total and per IP address.
#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// The pending handshakes of one listener and their limits.
#[derive(Debug, Clone)]
pub(super) struct Handshakes {
    counts: Arc<Mutex<Counts>>,
    max_total: usize,
    max_per_ip: usize,
}

/// Why a connection got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoSlot {
    /// Every slot is taken.
    Total,
    /// Its IP address holds its most slots.
    PerIp,
}

impl NoSlot {
    /// The metric label of the refusal.
    pub fn label(self) -> &'static str {
        match self {
            NoSlot::Total => "handshakes_total",
            NoSlot::PerIp => "handshakes_per_ip",
        }
    }
}

impl Handshakes {
    /// At most `max_total` handshakes at once, `max_per_ip` of them from one address.
    pub fn new(max_total: usize, max_per_ip: usize) -> Self {
        Self {
            counts: Arc::default(),
            max_total: max_total.max(1),
            max_per_ip: max_per_ip.max(1),
        }
    }

    /// A slot for a handshake with `ip`, held until the returned guard drops.
    pub fn take(&self, ip: IpAddr) -> Result<Slot, NoSlot> {
        let mut counts = self.counts.lock();
        if counts.total >= self.max_total {
            return Err(NoSlot::Total);
        }
        let from_ip = counts.per_ip.entry(ip).or_default();
        if *from_ip >= self.max_per_ip {
            return Err(NoSlot::PerIp);
        }
        *from_ip += 1;
        counts.total += 1;
        metrics::gauge!("stave_net_pending_handshakes").set(counts.total as f64);
        Ok(Slot {
            counts: self.counts.clone(),
            ip,
        })
    }

    /// Handshakes in progress now.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.counts.lock().total
    }
}

/// One handshake's slot; dropping it frees the slot.
#[derive(Debug)]
pub(super) struct Slot {
    counts: Arc<Mutex<Counts>>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        counts.total -= 1;
        // The entry exists while this slot does; an address with no slot left is removed,
        // so the map holds only addresses with handshakes in progress.
        if let Some(from_ip) = counts.per_ip.get_mut(&self.ip) {
            *from_ip -= 1;
            if *from_ip == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
        metrics::gauge!("stave_net_pending_handshakes").set(counts.total as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_in_total_and_per_address_and_freed_on_drop() {
        let handshakes = Handshakes::new(3, 2);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let first = handshakes.take(a).expect("a slot");
        let second = handshakes.take(a).expect("a second slot");
        assert_eq!(handshakes.take(a).err(), Some(NoSlot::PerIp));
        let third = handshakes.take(b).expect("another address");
        assert_eq!(handshakes.take(b).err(), Some(NoSlot::Total));
        drop(first);
        assert_eq!(handshakes.pending(), 2);
        let fourth = handshakes.take(a).expect("a freed slot");
        drop((second, third, fourth));
        assert_eq!(handshakes.pending(), 0);
        assert!(handshakes.counts.lock().per_ip.is_empty());
    }
}
