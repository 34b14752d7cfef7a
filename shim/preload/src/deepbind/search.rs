//! The part of glibc's library search that depends on the caller of `dlopen`: its `DT_RPATH`
//! or `DT_RUNPATH`, with `$ORIGIN`, redone for a `RTLD_DEEPBIND` call (which reaches us, not
//! glibc, with the caller's return address).

use super::elf::*;
use super::*;

/// The full path glibc would find for `file` from the caller's link map where that depends on
/// the caller (its `DT_RPATH`, or `DT_RUNPATH` after `LD_LIBRARY_PATH`; `$ORIGIN` in a path),
/// else `None` (pass the name unchanged). Also says whether a probe `dlopen` was made.
///
/// Safety: `file` is null or NUL-terminated; `real` is glibc's `dlopen`.
pub(super) unsafe fn callers_search(
    file: *const c_char,
    caller: *const c_void,
    real: DlopenFn,
) -> (Option<CString>, bool) {
    if file.is_null() {
        return (None, false);
    }
    // SAFETY: dlopen's argument is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(file) }.to_bytes();
    // SAFETY: caller is a code address; the map stays valid while its object is loaded, and
    // the object that called us is.
    let Some(map) = (unsafe { caller_map(caller) }) else {
        return (None, false);
    };
    // SAFETY: a live link map.
    let origin = unsafe { origin_of(map) };
    if name.contains(&b'/') {
        // glibc expands $ORIGIN in a path with the caller's directory.
        let expanded = expand_origin(name, origin.as_deref());
        return match expanded {
            Some(p) if p != name => (CString::new(p).ok(), false),
            _ => (None, false),
        };
    }
    // Already loaded under that name (or soname): glibc returns it whatever the paths say.
    // SAFETY: glibc's dlopen with the caller's name; the handle is closed at once.
    let probe = unsafe { real(file, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if !probe.is_null() {
        // SAFETY: the handle just returned.
        unsafe { libc::dlclose(probe) };
        return (None, true);
    }
    // SAFETY: a live link map.
    let (rpath, runpath) = unsafe { search_paths(map) };
    let found = if let Some(runpath) = runpath {
        // DT_RUNPATH comes after LD_LIBRARY_PATH, which glibc searches itself for any caller.
        if in_library_path(name) {
            None
        } else {
            find_in(&runpath, name, origin.as_deref())
        }
    } else if let Some(rpath) = rpath {
        find_in(&rpath, name, origin.as_deref())
    } else {
        None
    };
    (
        found.and_then(|p| CString::new(p.as_os_str().as_bytes()).ok()),
        true,
    )
}

/// The link map of the object holding `caller`, else the main program's (as glibc does).
///
/// Safety: none beyond the loader's own (any address may be asked about).
pub(super) unsafe fn caller_map(caller: *const c_void) -> Option<*const LinkMap> {
    // SAFETY: all-zero is a valid Dl_info (null pointers).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointers; dladdr1 only reads the loader's tables.
    if unsafe { dladdr1(caller, &mut info, &mut map, RTLD_DL_LINKMAP) } != 0 && !map.is_null() {
        return Some(map as *const LinkMap);
    }
    // Code in no object (JIT): the main program, the first map of the base namespace.
    // SAFETY: dladdr1 on the address of a function of ours, then walking `prev` links of the
    // loader's live list to its head.
    unsafe {
        let ours = resolve_real_dlopen as *const c_void;
        if dladdr1(ours, &mut info, &mut map, RTLD_DL_LINKMAP) == 0 || map.is_null() {
            return None;
        }
        let mut m = map as *const LinkMap;
        while !(*m).prev.is_null() {
            m = (*m).prev;
        }
        Some(m)
    }
}

/// The directory of the object of `map` (`/proc/self/exe`'s for the main program).
///
/// Safety: `map` is a link map of a loaded object.
pub(super) unsafe fn origin_of(map: *const LinkMap) -> Option<PathBuf> {
    // SAFETY: l_name of a live map is a NUL-terminated string (empty for the main program).
    let name = unsafe { (*map).name };
    let name = if name.is_null() {
        &b""[..]
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(name) }.to_bytes()
    };
    if name.is_empty() {
        return std::fs::read_link("/proc/self/exe")
            .ok()?
            .parent()
            .map(Path::to_path_buf);
    }
    if !name.contains(&b'/') {
        return None;
    }
    Path::new(std::ffi::OsStr::from_bytes(name))
        .parent()
        .map(Path::to_path_buf)
}

/// `name` with `$ORIGIN` and `${ORIGIN}` replaced by `origin`; `None` if it has another
/// dynamic string token, or `$ORIGIN` with no origin known.
pub(super) fn expand_origin(name: &[u8], origin: Option<&Path>) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.iter().position(|&b| b == b'$') {
        out.extend_from_slice(&rest[..i]);
        let tail = &rest[i..];
        let token = if tail.starts_with(b"${ORIGIN}") {
            9
        } else if tail.starts_with(b"$ORIGIN")
            && !tail
                .get(7)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            7
        } else {
            return None;
        };
        out.extend_from_slice(origin?.as_os_str().as_bytes());
        rest = &tail[token..];
    }
    out.extend_from_slice(rest);
    Some(out)
}

/// The caller's `DT_RPATH` and `DT_RUNPATH` strings.
///
/// Safety: `map` is a link map of a loaded object.
pub(super) unsafe fn search_paths(map: *const LinkMap) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    // SAFETY: l_ld of a live map is its dynamic section, ended by DT_NULL.
    let (base, mut d) = unsafe { ((*map).addr, (*map).ld) };
    let (mut strtab, mut strsz, mut rpath, mut runpath) = (0usize, 0usize, None, None);
    if d.is_null() {
        return (None, None);
    }
    // SAFETY: reading entries up to DT_NULL.
    unsafe {
        while (*d).tag != DT_NULL {
            let v = (*d).val;
            match (*d).tag {
                DT_STRTAB => strtab = relocated(v, base),
                DT_STRSZ => strsz = v as usize,
                DT_RPATH => rpath = Some(v as usize),
                DT_RUNPATH => runpath = Some(v as usize),
                _ => {}
            }
            d = d.add(1);
        }
    }
    let read = |off: Option<usize>| -> Option<Vec<u8>> {
        let off = off?;
        if strtab == 0 || off >= strsz {
            return None;
        }
        // SAFETY: an offset inside the string table, which holds NUL-terminated strings.
        let s = unsafe { CStr::from_ptr((strtab + off) as *const c_char) };
        Some(s.to_bytes().to_vec())
    };
    (read(rpath), read(runpath))
}

/// Whether `name` is in a directory of `LD_LIBRARY_PATH` (ignored, as glibc does, in a
/// set-uid program).
pub(super) fn in_library_path(name: &[u8]) -> bool {
    // SAFETY: getauxval has no preconditions.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return false;
    }
    let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") else {
        return false;
    };
    paths
        .as_bytes()
        .split(|&b| b == b':' || b == b';')
        .filter(|d| !d.is_empty())
        .any(|d| loadable(&Path::new(std::ffi::OsStr::from_bytes(d)).join(os(name))))
}

pub(super) fn os(b: &[u8]) -> &std::ffi::OsStr {
    std::ffi::OsStr::from_bytes(b)
}

/// The first `dir/name` of a `:`-separated search list that is a loadable x86_64 ELF file.
pub(super) fn find_in(list: &[u8], name: &[u8], origin: Option<&Path>) -> Option<PathBuf> {
    list.split(|&b| b == b':').find_map(|dir| {
        let dir = if dir.is_empty() { &b"."[..] } else { dir };
        let dir = expand_origin(dir, origin)?;
        let path = Path::new(os(&dir)).join(os(name));
        loadable(&path).then_some(path)
    })
}

/// A readable 64-bit little-endian x86_64 ELF file.
pub(super) fn loadable(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head[..4] == *b"\x7fELF"
        && head[4] == 2
        && head[5] == 1
        && u16::from_le_bytes([head[18], head[19]]) == 62
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_is_expanded_in_both_spellings() {
        let o = Some(Path::new("/opt/app"));
        assert_eq!(
            expand_origin(b"$ORIGIN/sub:${ORIGIN}/x", o).unwrap(),
            b"/opt/app/sub:/opt/app/x"
        );
        assert_eq!(expand_origin(b"/usr/lib", None).unwrap(), b"/usr/lib");
        assert!(expand_origin(b"$ORIGIN/sub", None).is_none());
        assert!(expand_origin(b"$LIB/x", o).is_none());
        assert!(expand_origin(b"$ORIGINAL/x", o).is_none());
    }

    #[test]
    fn search_lists_take_the_first_loadable_file() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let dir = exe.parent().unwrap();
        let name = exe.file_name().unwrap().as_bytes();
        let list = format!("/nonexistent:{}", dir.display());
        assert_eq!(find_in(list.as_bytes(), name, None), Some(exe.clone()));
        assert_eq!(find_in(b"/nonexistent", name, None), None);
    }
}
