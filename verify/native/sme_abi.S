// sme_abi.S: the two SME ABI support routines the panel leaves need, for toolchains without an
// aarch64 compiler-rt (Debian ships none). MIT.
//
// The leaves never call out of a ZA-using function, so no lazy ZA save is ever set up and
// TPIDR2_EL0 stays 0 (the AAPCS64 SME ABI: a zero TPIDR2_EL0 means there is nothing to save).
// Both routines check that and trap (brk) otherwise, rather than silently dropping a caller's ZA.
// Per the ABI they may clobber only x16/x17 (and the flags).
    .text
    .p2align 2
    .globl  __arm_tpidr2_save
    .type   __arm_tpidr2_save, %function
__arm_tpidr2_save:
    mrs     x16, tpidr2_el0
    cbz     x16, 1f
    brk     #0x5a
1:  ret
    .size   __arm_tpidr2_save, . - __arm_tpidr2_save

    .globl  __arm_za_disable
    .type   __arm_za_disable, %function
__arm_za_disable:
    mrs     x16, tpidr2_el0
    cbz     x16, 1f
    brk     #0x5a
1:  smstop  za
    ret
    .size   __arm_za_disable, . - __arm_za_disable
    .section .note.GNU-stack,"",%progbits
