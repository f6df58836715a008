//! Training keeps freed activations in glibc's heap for the next step
//! (`platform::keep_freed_heap_for_reuse`). Its own test binary: mallinfo2's counters
//! are process-wide, so another test allocating at the same time would blur them.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use std::hint::black_box;

/// Larger than glibc's default mmap threshold (128 KiB) and than an activation of the
/// CNN's step, smaller than the threshold the setting asks for.
const BLOCK: usize = 8 << 20;

fn heap() -> libc::mallinfo2 {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    unsafe { libc::mallinfo2() }
}

#[test]
fn a_freed_large_block_stays_in_the_heap_for_reuse() {
    headroom::platform::keep_freed_heap_for_reuse();
    let before = heap();
    let block = black_box(vec![1u8; BLOCK]);
    let while_alive = heap();
    assert!(
        while_alive.hblkhd < before.hblkhd + BLOCK,
        "the block was mapped on its own ({} -> {} mapped bytes): freeing it unmaps it",
        before.hblkhd,
        while_alive.hblkhd
    );
    drop(block);
    let after = heap();
    assert!(
        after.fordblks >= before.fordblks + BLOCK / 2,
        "the heap gave the freed block back ({} -> {} free bytes kept)",
        before.fordblks,
        after.fordblks
    );
}
