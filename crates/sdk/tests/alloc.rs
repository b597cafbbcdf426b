//! Signing allocates nothing per transaction but its output: counted by a global allocator
//! that tallies the allocations of the calling thread.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

use alloy_primitives::U256;
use stave_primitives::dev::dev_account;
use stave_sdk::{LocalSigner, TxBuilder};

thread_local! {
    /// Allocations made by this thread. `const`-initialised and without a destructor, so
    /// touching it from the allocator cannot allocate.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, counting each thread's allocations.
struct Counting;

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's `layout` obligations are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (ALLOCATIONS.with(Cell::get) - before, out)
}

#[test]
fn a_transfer_is_built_without_allocating_and_signed_into_one_allocation() {
    let signer = LocalSigner::from_secret(&dev_account(0).secret).expect("dev key");
    let to = dev_account(1).address;
    for builder in [
        TxBuilder::legacy(1337, 7),
        TxBuilder::eip2930(1337, 7),
        TxBuilder::eip1559(1337, 9, 2),
    ] {
        // The first signature on a thread grows its payload scratch buffer.
        signer.sign_raw(&builder.transfer(0, to, U256::from(1)));
        for nonce in 1..50 {
            let (built, tx) = allocations(|| builder.transfer(nonce, to, U256::from(1)));
            assert_eq!(built, 0, "{:?}", builder.format);
            let (signed, raw) = allocations(|| signer.sign_raw(&tx));
            assert_eq!(signed, 1, "{:?}: only the output bytes", builder.format);
            assert_eq!(raw.bytes.capacity(), raw.bytes.len(), "sized exactly");
        }
    }
}
