//! The WASI preview1 subset Envoy (proxy-wasm-cpp-host) provides: stdout/stderr go to
//! the log (info / error), clocks are the harness clock, randomness is seeded, there
//! are no args, no environment and no files.

use wasmtime::Linker;

use crate::hostcalls::{gate, read, write, write_u32, C};
use crate::vm::VmState;

/// Every `wasi_snapshot_preview1` import the host provides: proxy-wasm-cpp-host's
/// `FOR_ALL_WASI_FUNCTIONS` (include/proxy-wasm/exports.h). A module importing any
/// other (`poll_oneoff` for `std::thread::sleep`, `sched_yield`, `clock_res_get`,
/// `fd_fdstat_set_flags`) fails to load in Envoy, and here (until 2026-12-07 the
/// harness provided those four).
pub const NAMES: &[&str] = &[
    "fd_write",
    "fd_read",
    "fd_seek",
    "fd_close",
    "fd_fdstat_get",
    "fd_prestat_get",
    "fd_prestat_dir_name",
    "environ_get",
    "environ_sizes_get",
    "args_get",
    "args_sizes_get",
    "clock_time_get",
    "random_get",
    "proc_exit",
    "path_open",
];

const ESUCCESS: i32 = 0;
const EBADF: i32 = 8;
const EFAULT: i32 = 21;
const EINVAL: i32 = 28;
const ENOSYS: i32 = 52;
const ENOTSUP: i32 = 58;
/// cpp-host's `PROXY_WASM_HOST_WASI_RANDOM_GET_MAX_SIZE_BYTES`.
const RANDOM_GET_MAX: u32 = 64 * 1024;

fn errno<T>(r: Result<T, crate::hostcalls::HErr>) -> i32 {
    if r.is_ok() {
        ESUCCESS
    } else {
        EFAULT
    }
}

fn fd_write(c: &mut C, fd: i32, iovs: i32, n: i32, ret: i32) -> i32 {
    if fd != 1 && fd != 2 {
        return EBADF;
    }
    let mut out = Vec::new();
    for i in 0..n {
        let Ok(iov) = read(c, iovs + 8 * i, 8) else {
            return EFAULT;
        };
        let p = i32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]);
        let l = i32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
        let Ok(b) = read(c, p, l) else { return EFAULT };
        out.extend_from_slice(&b);
    }
    let written = out.len() as u32;
    let d = c.data();
    let msg = String::from_utf8_lossy(&out)
        .trim_end_matches('\n')
        .to_string();
    d.env.process.log(crate::env::LogRecord {
        time_ns: d.env.clock.now(),
        vm: d.vm_name.clone(),
        level: if fd == 1 { 2 } else { 4 },
        message: msg,
    });
    errno(write_u32(c, ret, written))
}

/// Defines `wasi_snapshot_preview1.$name`; a call while host calls are restricted to
/// a list it is not on traps ([`gate`]). `$c` is the caller, `&mut C`.
macro_rules! wasi {
    ($l:expr, $name:literal, |$c:ident $(, $a:ident : $t:ty)*| $body:expr) => {
        $l.func_wrap(
            "wasi_snapshot_preview1",
            $name,
            |mut $c: C, $($a: $t),*| -> wasmtime::Result<i32> {
                gate(&$c, concat!("wasi_snapshot_preview1.", $name))?;
                let $c = &mut $c;
                Ok($body)
            },
        )?;
    };
}

#[allow(clippy::redundant_closure_call)]
pub(crate) fn add_to_linker(l: &mut Linker<VmState>) -> wasmtime::Result<()> {
    wasi!(l, "fd_write", |c, fd: i32, iovs: i32, n: i32, ret: i32| {
        fd_write(c, fd, iovs, n, ret)
    });
    wasi!(l, "fd_read", |c, _fd: i32, _i: i32, _n: i32, _r: i32| {
        let _ = c;
        ENOSYS
    });
    wasi!(l, "fd_seek", |c, _fd: i32, _o: i64, _w: i32, _r: i32| {
        let _ = c;
        ENOSYS
    });
    wasi!(l, "fd_close", |c, _fd: i32| {
        let _ = c;
        ENOSYS
    });
    wasi!(l, "fd_fdstat_get", |c, fd: i32, buf: i32| {
        if fd != 1 && fd != 2 {
            EBADF
        } else {
            // filetype character_device (2), no flags, all rights.
            let mut st = [0u8; 24];
            st[0] = 2;
            st[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
            st[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
            errno(write(c, buf, &st))
        }
    });
    wasi!(l, "fd_prestat_get", |c, _fd: i32, _b: i32| {
        let _ = c;
        EBADF
    });
    wasi!(l, "fd_prestat_dir_name", |c, _fd: i32, _p: i32, _n: i32| {
        let _ = c;
        ENOSYS
    });
    wasi!(l, "environ_get", |c, _a: i32, _b: i32| {
        let _ = c;
        ESUCCESS
    });
    wasi!(l, "environ_sizes_get", |c, cnt: i32, size: i32| {
        errno(write_u32(c, cnt, 0).and_then(|_| write_u32(c, size, 0)))
    });
    wasi!(l, "args_get", |c, _a: i32, _b: i32| {
        let _ = c;
        ESUCCESS
    });
    wasi!(l, "args_sizes_get", |c, cnt: i32, size: i32| {
        errno(write_u32(c, cnt, 0).and_then(|_| write_u32(c, size, 0)))
    });
    wasi!(l, "clock_time_get", |c, id: i32, _prec: i64, ret: i32| {
        let clock = &c.data().env.clock;
        match id {
            0 => errno(write(c, ret, &clock.wall().to_le_bytes())),
            1 => errno(write(c, ret, &clock.monotonic().to_le_bytes())),
            _ => ENOTSUP, // CPU-time clocks, as cpp-host
        }
    });
    wasi!(l, "random_get", |c, buf: i32, len: i32| {
        let mem_len = c.data().memory.map(|m| m.data_size(&*c)).unwrap_or(0);
        if len as u32 > RANDOM_GET_MAX {
            // cpp-host refuses more than PROXY_WASM_HOST_WASI_RANDOM_GET_MAX_SIZE_BYTES.
            EINVAL
        } else if len as u32 as usize > mem_len {
            EFAULT
        } else {
            let mut b = vec![0u8; len as u32 as usize];
            c.data_mut().rng.fill(&mut b);
            errno(write(c, buf, &b))
        }
    });
    l.func_wrap(
        "wasi_snapshot_preview1",
        "proc_exit",
        |c: C, code: i32| -> wasmtime::Result<()> {
            gate(&c, "wasi_snapshot_preview1.proc_exit")?;
            Err(wasmtime::format_err!("proc_exit({code})"))
        },
    )?;
    wasi!(l, "path_open", |c,
                           _fd: i32,
                           _df: i32,
                           _p: i32,
                           _pl: i32,
                           _of: i32,
                           _rb: i64,
                           _ri: i64,
                           _ff: i32,
                           _r: i32| {
        let _ = c;
        ENOSYS
    });
    Ok(())
}
