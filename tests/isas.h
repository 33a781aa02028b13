/* The ISAs the tests run kernels at, in gml_isa order: the reference
 * kernels, the scalar ones, and every SIMD ISA of every architecture (x86's
 * AVX2 and AVX-512, AArch64's NEON). A test runs those the CPU has
 * (gml_cpu_has) and skips the others, saying so:
 *     static const gml_isa isas[] = {GML_TEST_ISAS};
 * GML_TEST_FAST_ISAS is the list without the reference, GML_TEST_SIMD_ISAS
 * without the scalar kernels too. */
#ifndef GGMLITE_TEST_ISAS_H
#define GGMLITE_TEST_ISAS_H

#include <ggmlite/ggmlite.h>

#define GML_TEST_SIMD_ISAS GML_ISA_AVX2, GML_ISA_AVX512, GML_ISA_NEON
#define GML_TEST_FAST_ISAS GML_ISA_SCALAR, GML_TEST_SIMD_ISAS
#define GML_TEST_ISAS GML_ISA_REFERENCE, GML_TEST_FAST_ISAS
/* How many GML_TEST_ISAS holds (an integer constant expression). */
#define GML_TEST_N_ISAS ((int)(sizeof((gml_isa[]){GML_TEST_ISAS}) / sizeof(gml_isa)))

#endif
