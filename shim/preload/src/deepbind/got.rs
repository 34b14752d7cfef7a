//! Pointing the GOT entries of hooked names in newly loaded objects at our hooks.

use super::elf::*;
use super::*;

/// Loaded objects, by load base and program headers.
pub(super) fn loaded_now() -> HashSet<(usize, usize)> {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: data is the set passed below; info is the entry glibc gives.
        unsafe {
            let set = &mut *(data as *mut HashSet<(usize, usize)>);
            set.insert(((*info).dlpi_addr as usize, (*info).dlpi_phdr as usize));
        }
        0
    }
    let mut set = HashSet::new();
    // SAFETY: the callback only reads its entry and writes the set, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut set as *mut _ as *mut c_void) };
    set
}

/// One object's planned GOT writes, or why it is left alone.
pub(super) struct Visit<'a> {
    before: &'a HashSet<(usize, usize)>,
    maps: &'a [Mapping],
    /// Object, slots written, whether any was a runtime function's (not `dlsym`/`dlopen`).
    patched: Vec<(String, usize, bool)>,
    failed: Vec<(String, String)>,
}

/// A line of `/proc/self/maps`: its range and protection.
pub(super) struct Mapping {
    start: usize,
    end: usize,
    prot: c_int,
}

pub(super) fn read_maps() -> Option<Vec<Mapping>> {
    let text = std::fs::read_to_string("/proc/self/maps").ok()?;
    text.lines()
        .map(|l| {
            let mut words = l.split_whitespace();
            let (start, end) = words.next()?.split_once('-')?;
            let perms = words.next()?.as_bytes();
            let mut prot = 0;
            for (i, bit) in [libc::PROT_READ, libc::PROT_WRITE, libc::PROT_EXEC]
                .into_iter()
                .enumerate()
            {
                if perms.get(i).is_some_and(|&c| c != b'-') {
                    prot |= bit;
                }
            }
            Some(Mapping {
                start: usize::from_str_radix(start, 16).ok()?,
                end: usize::from_str_radix(end, 16).ok()?,
                prot,
            })
        })
        .collect()
}

/// Points the GOT entries of hooked names in every object loaded since `before` at our hooks.
/// Runs inside `dl_iterate_phdr`, which holds the loader's lock: no object it visits can be
/// unmapped meanwhile.
pub(super) fn patch_new_objects(before: &HashSet<(usize, usize)>) {
    if loaded_now().is_subset(before) {
        return;
    }
    let Some(maps) = read_maps() else {
        log_with_config(|| {
            rocmguard_guard::log::warn(format_args!(
                "RTLD_DEEPBIND: /proc/self/maps unreadable; the library is not guarded"
            ))
        });
        return;
    };
    let mut visit = Visit {
        before,
        maps: &maps,
        patched: Vec::new(),
        failed: Vec::new(),
    };
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: data is the Visit passed below; info is the entry glibc gives. A panic is
        // caught here: it must not unwind through glibc.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            visit_object(&*info, &mut *(data as *mut Visit))
        }));
        0
    }
    // SAFETY: the callback only reads loader entries and writes GOT slots it checked.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut visit as *mut Visit as *mut c_void) };
    // Only objects that reach the runtime set the configuration (and its log) up: a plugin
    // whose one patched reference is `dlsym` starts nothing.
    if visit.failed.is_empty() && visit.patched.iter().all(|(_, _, guarded)| !guarded) {
        return;
    }
    log_with_config(|| {
        for (object, why) in &visit.failed {
            rocmguard_guard::log::warn(format_args!("RTLD_DEEPBIND library {}: {}", object, why));
        }
        for (object, n, _) in &visit.patched {
            rocmguard_guard::log::info(format_args!(
                "RTLD_DEEPBIND: {} references of {} routed to the hooks",
                n, object
            ));
        }
    });
}

/// Patches one object if it is new and neither ours nor a runtime library.
///
/// Safety: `info` is an entry `dl_iterate_phdr` is visiting (its object stays loaded).
pub(super) unsafe fn visit_object(info: &libc::dl_phdr_info, visit: &mut Visit) {
    let key = (info.dlpi_addr as usize, info.dlpi_phdr as usize);
    if visit.before.contains(&key) || info.dlpi_phdr.is_null() {
        return;
    }
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let file = name.rsplit('/').next().unwrap_or("");
    if rocmguard_guard::is_runtime_library(file) || BELOW_HIP.iter().any(|p| file.starts_with(p)) {
        return;
    }
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let base = info.dlpi_addr as usize;
    let (lo, hi) =
        phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .fold((usize::MAX, 0), |(lo, hi), p| {
                let start = base.wrapping_add(p.p_vaddr as usize);
                (
                    lo.min(start),
                    hi.max(start.wrapping_add(p.p_memsz as usize)),
                )
            });
    let ours = resolve_real_dlopen as *const () as usize;
    if lo >= hi || (lo..hi).contains(&ours) {
        return;
    }
    let object = Object { base, lo, hi };
    // SAFETY: the object is loaded (we are inside dl_iterate_phdr) and its tables are checked
    // to lie inside its mapped range before they are read.
    let plan = match unsafe { object.plan(phdrs) } {
        Ok(plan) => plan,
        Err(why) => {
            let why = format!(
                "left unpatched ({}): its runtime calls are not guarded",
                why
            );
            visit.failed.push((name, why));
            return;
        }
    };
    let guarded = plan.iter().any(|w| w.guarded);
    let (written, problem) = object.apply(&plan, visit.maps);
    if written > 0 {
        visit.patched.push((name.clone(), written, guarded));
    }
    if let Some(problem) = problem {
        visit.failed.push((name, problem));
    }
}

/// A loaded object: its load base and the span of its `PT_LOAD` segments.
pub(super) struct Object {
    base: usize,
    lo: usize,
    hi: usize,
}

impl Object {
    fn inside(&self, addr: usize, len: usize) -> bool {
        addr >= self.lo && addr.checked_add(len).is_some_and(|end| end <= self.hi)
    }

    /// The GOT writes for this object.
    ///
    /// Safety: the object is loaded and `phdrs` are its program headers.
    unsafe fn plan(&self, phdrs: &[libc::Elf64_Phdr]) -> Result<Vec<Write>, String> {
        let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
            return Ok(Vec::new());
        };
        let mut d = self.base.wrapping_add(dynamic.p_vaddr as usize);
        let count = dynamic.p_memsz as usize / std::mem::size_of::<Dyn>();
        if !self.inside(d, count * std::mem::size_of::<Dyn>()) {
            return Err("dynamic section outside the object".into());
        }
        let mut t = Tables::default();
        for _ in 0..count {
            // SAFETY: inside the dynamic section, checked above.
            let e = unsafe { &*(d as *const Dyn) };
            match e.tag {
                DT_NULL => break,
                DT_JMPREL => t.jmprel = relocated(e.val, self.base),
                DT_PLTRELSZ => t.pltrelsz = e.val as usize,
                DT_PLTREL => t.pltrel = e.val as i64,
                DT_RELA => t.rela = relocated(e.val, self.base),
                DT_RELASZ => t.relasz = e.val as usize,
                DT_RELAENT => t.relaent = e.val as usize,
                DT_REL => t.has_rel = true,
                DT_SYMTAB => t.symtab = relocated(e.val, self.base),
                DT_SYMENT => t.syment = e.val as usize,
                DT_STRTAB => t.strtab = relocated(e.val, self.base),
                DT_STRSZ => t.strsz = e.val as usize,
                _ => {}
            }
            d += std::mem::size_of::<Dyn>();
        }
        if t.has_rel || (t.pltrelsz != 0 && t.pltrel != DT_RELA) {
            return Err("REL relocations on x86_64".into());
        }
        if t.relaent != 0 && t.relaent != std::mem::size_of::<Rela>() {
            return Err("unexpected relocation entry size".into());
        }
        if t.syment != 0 && t.syment != std::mem::size_of::<Sym>() {
            return Err("unexpected symbol entry size".into());
        }
        if t.symtab == 0 || t.strtab == 0 || !self.inside(t.strtab, t.strsz) {
            return Ok(Vec::new());
        }
        let mut plan = Vec::new();
        for (table, size) in [(t.jmprel, t.pltrelsz), (t.rela, t.relasz)] {
            if table == 0 || size == 0 {
                continue;
            }
            if !self.inside(table, size) {
                return Err("relocations outside the object".into());
            }
            let n = size / std::mem::size_of::<Rela>();
            // SAFETY: the table lies inside the object, checked above; Rela is plain data.
            let relas = unsafe { std::slice::from_raw_parts(table as *const Rela, n) };
            for r in relas {
                // SAFETY: the symbol and string tables are checked before they are read.
                if let Some(w) = unsafe { self.write_for(r, &t) }? {
                    plan.push(w);
                }
            }
        }
        Ok(plan)
    }

    /// Our address for the slot of relocation `r`, if it names a hooked function the object
    /// does not define itself and the slot already holds a resolved address.
    ///
    /// Safety: `t.symtab`, `t.strtab` and `t.strsz` come from this loaded object's dynamic
    /// section, and the string table was checked to lie inside it.
    unsafe fn write_for(&self, r: &Rela, t: &Tables) -> Result<Option<Write>, String> {
        let kind = r.info & 0xffff_ffff;
        let index = (r.info >> 32) as usize;
        if (kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT) || index == 0 {
            return Ok(None);
        }
        let sym_at = index
            .checked_mul(std::mem::size_of::<Sym>())
            .and_then(|o| t.symtab.checked_add(o))
            .filter(|&a| self.inside(a, std::mem::size_of::<Sym>()))
            .ok_or("symbol index outside the object")?;
        // SAFETY: inside the object, checked above; Sym is plain data.
        let sym = unsafe { &*(sym_at as *const Sym) };
        let sym_type = sym.info & 0xf;
        if sym.shndx != 0 || (sym_type != STT_FUNC && sym_type != STT_NOTYPE) {
            return Ok(None);
        }
        let name_at = sym.name as usize;
        if name_at >= t.strsz {
            return Err("symbol name outside the string table".into());
        }
        // SAFETY: strtab..strtab+strsz is inside the object (checked in plan).
        let strings = unsafe { std::slice::from_raw_parts(t.strtab as *const u8, t.strsz) };
        let Some(len) = strings[name_at..].iter().position(|&b| b == 0) else {
            return Err("unterminated symbol name".into());
        };
        let name = &strings[name_at..name_at + len];
        let slot = self.base.wrapping_add(r.offset as usize);
        if !slot.is_multiple_of(8) || !self.inside(slot, 8) {
            return Err("GOT slot outside the object".into());
        }
        // SAFETY: an aligned slot inside the object's mapped range, written by the loader.
        let current = unsafe { AtomicUsize::from_ptr(slot as *mut usize) }.load(Ordering::Acquire);
        if current == 0 {
            // An unresolved weak reference: the library tests it for null; leave it so.
            return Ok(None);
        }
        let guarded = !matches!(name, b"dlsym" | b"dlopen");
        let hook = match name {
            b"dlsym" => deep_dlsym as *const () as usize,
            b"dlopen" => dlopen as *const () as usize,
            _ if rocmguard_guard::degraded() => return Ok(None),
            _ => {
                // A lazy slot still points into the object's own PLT: not the real function.
                let real = if self.inside(current, 1) { 0 } else { current };
                match rocmguard_guard::hook_for(name, real) {
                    Some(h) => h,
                    None => return Ok(None),
                }
            }
        };
        Ok((hook != current).then_some(Write {
            slot,
            hook,
            guarded,
        }))
    }

    /// Writes the planned slots, a page at a time, each page made writable for the writes
    /// and given its protection back after. Returns how many slots were written, and what
    /// went wrong, if anything (a slot is either written or left as the loader bound it).
    fn apply(&self, plan: &[Write], maps: &[Mapping]) -> (usize, Option<String>) {
        match self.write_pages(plan, maps) {
            Ok((n, None)) => (n, None),
            Ok((n, Some(e))) => (
                n,
                Some(format!("patched, but a GOT page stayed writable ({})", e)),
            ),
            Err((0, why)) => (
                0,
                Some(format!(
                    "left unpatched ({}): its runtime calls are not guarded",
                    why
                )),
            ),
            Err((n, why)) => (
                n,
                Some(format!(
                    "partly patched ({} after {} of {} references): the rest are not guarded",
                    why,
                    n,
                    plan.len()
                )),
            ),
        }
    }

    /// [`Object::apply`]'s writes: `Ok((written, a page left writable))` or
    /// `Err((written, why it stopped))`.
    fn write_pages(
        &self,
        plan: &[Write],
        maps: &[Mapping],
    ) -> Result<(usize, Option<std::io::Error>), (usize, String)> {
        if plan.is_empty() {
            return Ok((0, None));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        if !page.is_power_of_two() {
            return Err((0, "no page size".into()));
        }
        let mut pages: Vec<usize> = plan.iter().map(|w| w.slot & !(page - 1)).collect();
        pages.sort_unstable();
        pages.dedup();
        // Every page's protection first: nothing is written unless all are known.
        let mut prots = Vec::with_capacity(pages.len());
        for &p in &pages {
            let prot = maps
                .iter()
                .find(|m| m.start <= p && p < m.end)
                .map(|m| m.prot)
                .ok_or((0, "GOT page not in /proc/self/maps".to_string()))?;
            if prot & libc::PROT_READ == 0 {
                return Err((0, "GOT page not readable".into()));
            }
            prots.push(prot);
        }
        let mut written = 0;
        let mut left_writable = None;
        for (&p, &prot) in pages.iter().zip(&prots) {
            let writable = prot & libc::PROT_WRITE != 0;
            // SAFETY: a page of the object's own mapping, given write access on top of what
            // it has; restored below.
            if !writable
                && unsafe { libc::mprotect(p as *mut c_void, page, prot | libc::PROT_WRITE) } != 0
            {
                let e = std::io::Error::last_os_error();
                return Err((written, format!("mprotect refused: {}", e)));
            }
            for &Write { slot, hook, .. } in plan.iter().filter(|w| w.slot & !(page - 1) == p) {
                // SAFETY: an aligned GOT slot of the object, now writable; other threads may
                // read it at any time, so one atomic store.
                unsafe { AtomicUsize::from_ptr(slot as *mut usize) }.store(hook, Ordering::Release);
                written += 1;
            }
            // SAFETY: the same page, given back the protection it had.
            if !writable && unsafe { libc::mprotect(p as *mut c_void, page, prot) } != 0 {
                left_writable = Some(std::io::Error::last_os_error());
            }
        }
        Ok((written, left_writable))
    }
}

/// One planned GOT write: the slot, our address for it, and whether it is a runtime
/// function's (rather than `dlsym`'s or `dlopen`'s).
pub(super) struct Write {
    slot: usize,
    hook: usize,
    guarded: bool,
}

/// What `plan` reads from a dynamic section.
#[derive(Default)]
pub(super) struct Tables {
    jmprel: usize,
    pltrelsz: usize,
    pltrel: i64,
    rela: usize,
    relasz: usize,
    relaent: usize,
    has_rel: bool,
    symtab: usize,
    syment: usize,
    strtab: usize,
    strsz: usize,
}
