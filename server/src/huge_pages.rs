//! Transparent huge pages for SubLane's memory: off unless the configuration allows them.
//!
//! The allocator asks the kernel for huge pages (`madvise`) on its arenas. A huge page is
//! resident as a whole once one byte of it is touched, so the parts of buffers that are reserved
//! but never written count too: hyper keeps four 8 KiB buffers per proxied stream (its read
//! buffer and head buffer on each side) of which a stream writes a few hundred bytes. With 8,000
//! open streams that took SubLane from 32.9 to 49.8 KiB of resident memory per stream
//! (`make bench`, performance goal 3). Huge pages save 3-6 % of CPU per call at full load
//! (fewer TLB misses), which a deployment that is CPU-bound rather than memory-bound may prefer.

/// Forbids transparent huge pages for this whole process from now on (pages already backed stay
/// as they are), unless `allowed`. Allowed leaves the kernel's setting alone, so a disable
/// inherited from a parent process or a service manager still holds. Linux only; elsewhere a
/// no-op.
pub fn apply(allowed: bool) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    if !allowed {
        rustix::thread::disable_transparent_huge_pages(true)?;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = allowed;
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn forbidding_reaches_the_kernel_and_allowing_leaves_it_alone() {
        if let Err(e) = apply(false) {
            // A sandbox that refuses prctl: SubLane logs this and goes on.
            eprintln!("skipped: the kernel refused the setting: {e}");
            return;
        }
        assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap());
        apply(true).unwrap();
        assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap(), "allowing undoes no disable");
    }
}
