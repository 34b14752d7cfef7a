//! The ELF and link-map shapes the `RTLD_DEEPBIND` patcher reads (`<elf.h>`, `<link.h>`), x86_64.

use std::ffi::{c_char, c_int};

pub(super) const DT_NULL: i64 = 0;
pub(super) const DT_PLTRELSZ: i64 = 2;
pub(super) const DT_STRTAB: i64 = 5;
pub(super) const DT_SYMTAB: i64 = 6;
pub(super) const DT_RELA: i64 = 7;
pub(super) const DT_RELASZ: i64 = 8;
pub(super) const DT_RELAENT: i64 = 9;
pub(super) const DT_STRSZ: i64 = 10;
pub(super) const DT_SYMENT: i64 = 11;
pub(super) const DT_RPATH: i64 = 15;
pub(super) const DT_REL: i64 = 17;
pub(super) const DT_PLTREL: i64 = 20;
pub(super) const DT_JMPREL: i64 = 23;
pub(super) const DT_RUNPATH: i64 = 29;
pub(super) const PT_LOAD: u32 = 1;
pub(super) const PT_DYNAMIC: u32 = 2;
pub(super) const R_X86_64_GLOB_DAT: u64 = 6;
pub(super) const R_X86_64_JUMP_SLOT: u64 = 7;
pub(super) const STT_NOTYPE: u8 = 0;
pub(super) const STT_FUNC: u8 = 2;
pub(super) const RTLD_DL_LINKMAP: c_int = 2;

#[repr(C)]
pub(super) struct Dyn {
    pub(super) tag: i64,
    pub(super) val: u64,
}

#[repr(C)]
pub(super) struct Rela {
    pub(super) offset: u64,
    pub(super) info: u64,
    pub(super) addend: i64,
}

#[repr(C)]
pub(super) struct Sym {
    pub(super) name: u32,
    pub(super) info: u8,
    pub(super) other: u8,
    pub(super) shndx: u16,
    pub(super) value: u64,
    pub(super) size: u64,
}

/// The public head of glibc's `struct link_map` (`<link.h>`).
#[repr(C)]
pub(super) struct LinkMap {
    pub(super) addr: usize,
    pub(super) name: *const c_char,
    pub(super) ld: *const Dyn,
    pub(super) next: *const LinkMap,
    pub(super) prev: *const LinkMap,
}

/// An address from the dynamic section: glibc relocates most in place on x86_64, but not in a
/// read-only dynamic section (the vDSO); an address below the load base is still an offset.
pub(super) fn relocated(v: u64, base: usize) -> usize {
    let v = v as usize;
    if v < base {
        v.wrapping_add(base)
    } else {
        v
    }
}
