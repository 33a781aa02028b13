/* GML_API marks what the ggmlite libraries export: every function the
 * installed headers declare, and nothing else. The libraries are compiled
 * with -fvisibility=hidden, so a shared libggmlite*.so exports exactly the
 * declarations marked so (tests/install checks it with nm -D); in a program
 * using the libraries it marks declarations of symbols defined elsewhere,
 * which changes nothing. */
#ifndef GGMLITE_EXPORT_H
#define GGMLITE_EXPORT_H

#if defined(__GNUC__)
#define GML_API __attribute__((visibility("default")))
#else
#define GML_API
#endif

#endif
