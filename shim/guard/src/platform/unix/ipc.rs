//! Sharing pooled blocks with other processes (`hipIpcGetMemHandle`, `cudaIpcGetMemHandle`
//! and their open and close). The runtimes refuse IPC handles for virtual memory, which is
//! where the pool keeps its blocks, so for such a block the shim makes the handle itself: 64
//! bytes naming this process, an export number and a secret. The exporter answers on a Unix
//! socket in the user's private runtime directory (0700, the group cap's directory) with one
//! file descriptor per piece of device memory under the block (`SCM_RIGHTS`; the pieces are made
//! exportable for this, `Vmm::sharing`). The opener, under the shim too, imports and maps them
//! into a range of its own and gets the block's start there: the same bytes, shared both ways.
//! An opener without the shim hands these bytes to its runtime, which does not know them and
//! answers an error: a clean failure, never another allocation's memory. (ROCm reads the size
//! at bytes 32..40 of the handle first and refuses 0 with `hipErrorInvalidValue`, clr
//! `hipIpcOpenMemHandle`; ours are 0 there.)
//!
//! Blocks of plain segments go to the runtime. ROCm's handle carries the block's offset in its
//! allocation (clr `hipIpcGetMemHandle` fills `poffset`), CUDA's names the enclosing allocation
//! and maps its base, so on CUDA a plain block that does not begin its segment is refused with
//! `cudaErrorInvalidValue`, said once.

use std::collections::HashMap;
use std::ffi::c_void;
use std::io::{Read, Write};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::guard::Guard;
use crate::log;
use crate::vmm::Vmm;

/// The size of `hipIpcMemHandle_t` / `cudaIpcMemHandle_t` / `CUipcMemHandle`.
pub const HANDLE_BYTES: usize = 64;
const MAGIC: &[u8; 16] = b"rocmguard-ipc-v1";
/// `hipErrorInvalidValue` / `cudaErrorInvalidValue`: what the runtimes answer for memory they
/// cannot share and for handles they cannot open.
const INVALID_VALUE: i32 = 1;

/// `hipIpcMemHandle_t` and its CUDA twins, passed by value to the open calls.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle(pub [u8; HANDLE_BYTES]);

/// One block handed out to other processes.
struct Export {
    secret: u64,
    /// Where the block starts, from the first piece's start.
    offset: u64,
    /// Pieces under it: (size, token).
    pieces: Vec<(u64, u64)>,
}

/// What this process exports, by number (index + 1), and the descriptors of exported pieces by
/// token (one per piece, however often it is shared; closed when the piece goes back).
#[derive(Default)]
struct Exports {
    pid: u32,
    list: Vec<Export>,
    fds: HashMap<u64, RawFd>,
    serving: bool,
}

static EXPORTS: Mutex<Option<Exports>> = Mutex::new(None);
/// Whether any piece was ever exported: the pool's unmap path looks no further otherwise.
static EXPORTED: AtomicBool = AtomicBool::new(false);

/// A block this process opened: the range it is mapped in, each piece's size and handle there,
/// and the functions that mapped it.
struct Import {
    base: u64,
    pieces: Vec<(u64, u64)>,
    vmm: Vmm,
}

/// What this process opened, by the address it was given.
static IMPORTS: Mutex<Option<HashMap<u64, Import>>> = Mutex::new(None);

static SAID: AtomicBool = AtomicBool::new(false);

fn say_once(args: std::fmt::Arguments) {
    if !SAID.swap(true, Ordering::Relaxed) {
        log::warn(args);
    }
}

fn pid() -> u32 {
    std::process::id()
}

/// The socket of process `pid`, in the directory of this user's groups.
fn socket_path(pid: u32) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let base = rocmguard_core::group::base_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref(), uid);
    base.join(format!("ipc-{}.sock", pid))
}

fn secret() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(pid());
    h.finish()
}

impl Guard {
    /// `IpcGetMemHandle(handle, ptr)`: see the module docs. `whole_allocation`: the runtime's
    /// handle names the enclosing allocation (CUDA), not the block.
    ///
    /// # Safety
    /// `handle` is null or valid for 64 bytes of writes, as the runtime requires.
    pub unsafe fn ipc_get(
        &'static self,
        handle: *mut c_void,
        ptr: *mut c_void,
        whole_allocation: bool,
        pass: impl FnOnce() -> i32,
    ) -> i32 {
        let a = match self.active() {
            Some(a) if !handle.is_null() => a,
            _ => return pass(),
        };
        let addr = ptr as u64;
        for (_, pool) in a.existing_pools() {
            if let Some((block, pieces)) = pool.pieces_under(addr) {
                return match pool.source().virtual_memory() {
                    // CUDA's opener gets the allocation's start, ROCm's the very address
                    // (clr `IpcAttach` adds `poffset`).
                    Some(vmm) if vmm.shareable => {
                        match export(vmm, if whole_allocation { block } else { addr }, &pieces) {
                            Ok(bytes) => {
                                std::ptr::copy_nonoverlapping(
                                    bytes.as_ptr(),
                                    handle as *mut u8,
                                    HANDLE_BYTES,
                                );
                                0
                            }
                            Err(why) => {
                                say_once(format_args!(
                                    "IPC handle for pooled memory refused: {}",
                                    why
                                ));
                                INVALID_VALUE
                            }
                        }
                    }
                    _ => {
                        say_once(format_args!(
                            "IPC handle for pooled memory refused: the runtime cannot export this device's virtual memory; ROCMGUARD_VMM=0 keeps shareable plain segments"
                        ));
                        INVALID_VALUE
                    }
                };
            }
            if whole_allocation
                && pool.block_containing(addr).is_some()
                && !pool.starts_plain_segment(addr)
            {
                say_once(format_args!(
                    "IPC handle for pooled memory that does not begin its own allocation: refused (the other process would map the wrong address)"
                ));
                return INVALID_VALUE;
            }
        }
        pass()
    }

    /// `IpcOpenMemHandle(dev_ptr, handle, flags)`: our handles are opened here, others by the
    /// runtime.
    ///
    /// # Safety
    /// `dev_ptr` is null or valid for a write.
    pub unsafe fn ipc_open(
        &'static self,
        dev_ptr: *mut *mut c_void,
        handle: IpcHandle,
        pass: impl FnOnce() -> i32,
    ) -> i32 {
        if handle.0[..MAGIC.len()] != MAGIC[..] {
            return pass();
        }
        let vmm = match self.active() {
            Some(a) if !dev_ptr.is_null() => {
                a.current_device().and_then(|d| a.virtual_memory_for(d))
            }
            _ => return INVALID_VALUE,
        };
        let opened = vmm
            .ok_or_else(|| "this device has no virtual memory to map it into".to_string())
            .and_then(|vmm| open(vmm, &handle.0));
        match opened {
            Ok(ptr) => {
                *dev_ptr = ptr as *mut c_void;
                0
            }
            Err(why) => {
                say_once(format_args!(
                    "opening a rocmguard IPC handle failed: {}",
                    why
                ));
                INVALID_VALUE
            }
        }
    }

    /// `IpcCloseMemHandle(ptr)`: what we opened is unmapped here, the rest by the runtime.
    pub fn ipc_close(&'static self, ptr: *mut c_void, pass: impl FnOnce() -> i32) -> i32 {
        let opened = IMPORTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .remove(&(ptr as u64));
        match opened {
            Some(import) => {
                let mut code = 0;
                let mut at = import.base;
                for (size, handle) in &import.pieces {
                    if let Err(e) = import.vmm.unmap(at, *size, *handle) {
                        code = e;
                    }
                    at += size;
                }
                if let Err(e) = import.vmm.unreserve(import.base, at - import.base) {
                    code = e;
                }
                code
            }
            None => pass(),
        }
    }
}

/// Registers block `start` over `pieces` for sharing; its handle's bytes.
fn export(vmm: &Vmm, start: u64, pieces: &[(u64, u64, u64)]) -> Result<[u8; HANDLE_BYTES], String> {
    let first = pieces.first().ok_or("no device memory under the block")?.0;
    let mut guard = EXPORTS.lock().unwrap_or_else(|e| e.into_inner());
    if guard.as_ref().is_none_or(|e| e.pid != pid()) {
        // New, or inherited through fork: the parent's server and descriptors are not ours.
        *guard = Some(Exports {
            pid: pid(),
            ..Default::default()
        });
    }
    let exports = guard.as_mut().expect("set above");
    if !exports.serving {
        serve()?;
        exports.serving = true;
    }
    for &(_, _, token) in pieces {
        if let std::collections::hash_map::Entry::Vacant(slot) = exports.fds.entry(token) {
            let fd = vmm
                .export_fd(token)
                .map_err(|c| format!("the runtime did not export a piece (code {})", c))?;
            slot.insert(fd);
            EXPORTED.store(true, Ordering::Release);
        }
    }
    let secret = secret();
    exports.list.push(Export {
        secret,
        offset: start - first,
        pieces: pieces.iter().map(|p| (p.1, p.2)).collect(),
    });
    let mut bytes = [0u8; HANDLE_BYTES];
    bytes[..16].copy_from_slice(MAGIC);
    bytes[16..20].copy_from_slice(&pid().to_le_bytes());
    bytes[20..24].copy_from_slice(&(exports.list.len() as u32).to_le_bytes());
    bytes[24..32].copy_from_slice(&secret.to_le_bytes());
    Ok(bytes)
}

/// A piece went back to the device: its descriptor, if exported, is closed (an opener that
/// already imported it keeps its own reference to the memory).
pub fn forget(token: u64) {
    if !EXPORTED.load(Ordering::Acquire) {
        return;
    }
    let mut guard = EXPORTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = guard.as_mut() {
        if let Some(fd) = e.fds.remove(&token) {
            // SAFETY: a descriptor this module owns, closed once.
            unsafe { libc::close(fd) };
            // Its exports are over: a later piece given the same token is other memory.
            for x in e
                .list
                .iter_mut()
                .filter(|x| x.pieces.iter().any(|p| p.1 == token))
            {
                x.pieces.clear();
            }
        }
    }
}

/// At exit: this process's socket, if it served, goes (handles of a process that has exited
/// fail to open either way).
pub fn remove_socket() {
    let guard = EXPORTS.lock().unwrap_or_else(|e| e.into_inner());
    if guard.as_ref().is_some_and(|e| e.serving && e.pid == pid()) {
        let _ = std::fs::remove_file(socket_path(pid()));
    }
}

/// Starts answering openers on this process's socket.
fn serve() -> Result<(), String> {
    let path = socket_path(pid());
    if let Some(dir) = path.parent() {
        crate::platform::group::private_dir_made(dir)?;
    }
    // A socket left by an earlier process with our pid.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| format!("{}: {}", path.display(), e))?;
    std::thread::Builder::new()
        .name("rocmguard-ipc".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = answer(stream);
            }
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The uid of the process at the other end.
fn peer_uid(s: &UnixStream) -> Option<u32> {
    // SAFETY: ucred is plain integers; all zeros is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a connected socket and an out-struct of the size given.
    let ok = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut c_void,
            &mut len,
        )
    } == 0;
    ok.then_some(cred.uid)
}

/// One opener: `id secret` in, then `status count offset` and one message per piece carrying
/// its size and its descriptor.
fn answer(mut s: UnixStream) -> std::io::Result<()> {
    // SAFETY: getuid has no preconditions.
    if peer_uid(&s) != Some(unsafe { libc::getuid() }) {
        return Ok(());
    }
    let mut ask = [0u8; 12];
    s.read_exact(&mut ask)?;
    let id = u32::from_le_bytes(ask[..4].try_into().expect("4 bytes")) as usize;
    let secret = u64::from_le_bytes(ask[4..].try_into().expect("8 bytes"));
    let found = {
        let guard = EXPORTS.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().and_then(|e| {
            let x = e
                .list
                .get(id.checked_sub(1)?)
                .filter(|x| x.secret == secret)?;
            let fds: Option<Vec<(u64, RawFd)>> = x
                .pieces
                .iter()
                .map(|(size, token)| e.fds.get(token).map(|fd| (*size, *fd)))
                .collect();
            // Duplicated under the lock: a piece going back meanwhile closes only its own.
            fds.map(|fds| {
                let dups: Vec<(u64, RawFd)> = fds
                    .into_iter()
                    // SAFETY: descriptors this module owns; the copies are closed below.
                    .map(|(size, fd)| (size, unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) }))
                    .collect();
                (x.offset, dups)
            })
        })
    };
    let (offset, fds) = match found {
        Some(f) if f.1.iter().all(|(_, fd)| *fd >= 0) => f,
        other => {
            for (_, fd) in other.map(|f| f.1).unwrap_or_default() {
                if fd >= 0 {
                    // SAFETY: a descriptor we received and own, closed once.
                    unsafe { libc::close(fd) };
                }
            }
            let mut head = [0u8; 16];
            head[..4].copy_from_slice(&1u32.to_le_bytes());
            return s.write_all(&head);
        }
    };
    let mut head = [0u8; 16];
    head[4..8].copy_from_slice(&(fds.len() as u32).to_le_bytes());
    head[8..16].copy_from_slice(&offset.to_le_bytes());
    let mut sent = s.write_all(&head);
    for (size, fd) in fds {
        if sent.is_ok() {
            sent = send_fd(&s, size, fd);
        }
        // SAFETY: our copy, sent or not.
        unsafe { libc::close(fd) };
    }
    sent
}

/// Space for one descriptor's control message.
const CMSG_BYTES: usize = 64;

/// A message header over one 8-byte payload and a control buffer for one descriptor.
fn header(iov: &mut libc::iovec, control: &mut [u8; CMSG_BYTES], len: usize) -> libc::msghdr {
    // SAFETY: msghdr is plain data; all-zero is its empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut c_void;
    msg.msg_controllen = len as _;
    msg
}

fn send_fd(s: &UnixStream, size: u64, fd: RawFd) -> std::io::Result<()> {
    let payload = size.to_le_bytes();
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut c_void,
        iov_len: payload.len(),
    };
    let mut control = [0u8; CMSG_BYTES];
    // SAFETY: msghdr points at live buffers; the control buffer holds one descriptor's message
    // (CMSG_SPACE of an int is far below 64 bytes).
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let msg = header(&mut iov, &mut control, space);
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
        if libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn recv_fd(s: &UnixStream) -> std::io::Result<(u64, RawFd)> {
    let mut payload = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr() as *mut c_void,
        iov_len: payload.len(),
    };
    let mut control = [0u8; CMSG_BYTES];
    // SAFETY: as in `send_fd`; the descriptor is read only from a SCM_RIGHTS message.
    unsafe {
        let mut msg = header(&mut iov, &mut control, CMSG_BYTES);
        let n = libc::recvmsg(
            s.as_raw_fd(),
            &mut msg,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL,
        );
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if n != payload.len() as isize
            || cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "no descriptor",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const RawFd);
        Ok((u64::from_le_bytes(payload), fd))
    }
}

/// Asks the exporter named in `bytes` for the pieces and maps them; the block's address here.
fn open(vmm: Vmm, bytes: &[u8; HANDLE_BYTES]) -> Result<u64, String> {
    let exporter = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    let path = socket_path(exporter);
    let mut s = UnixStream::connect(&path).map_err(|e| {
        format!(
            "cannot reach process {} at {} ({}): it has exited, or runs with another XDG_RUNTIME_DIR",
            exporter,
            path.display(),
            e
        )
    })?;
    s.write_all(&bytes[20..32]).map_err(|e| e.to_string())?;
    let mut head = [0u8; 16];
    s.read_exact(&mut head).map_err(|e| e.to_string())?;
    let status = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
    if status != 0 {
        return Err(format!("process {} no longer shares that block", exporter));
    }
    let count = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
    let offset = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
    let mut pieces = Vec::with_capacity(count);
    let mut received = Ok(());
    for _ in 0..count {
        match recv_fd(&s) {
            Ok(p) => pieces.push(p),
            Err(e) => {
                received = Err(e.to_string());
                break;
            }
        }
    }
    let mapped = received.and_then(|()| {
        let fds: Vec<(RawFd, u64)> = pieces.iter().map(|(size, fd)| (*fd, *size)).collect();
        vmm.map_imported(&fds)
            .map_err(|c| format!("mapping it failed (code {})", c))
    });
    for (_, fd) in &pieces {
        // SAFETY: descriptors received above; the imported handles hold their own references.
        unsafe { libc::close(*fd) };
    }
    let (base, _, handles) = mapped?;
    let ptr = base + offset;
    let import = Import {
        base,
        pieces: pieces.iter().map(|p| p.0).zip(handles).collect(),
        vmm,
    };
    IMPORTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(ptr, import);
    Ok(ptr)
}
