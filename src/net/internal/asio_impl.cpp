// The compiled part of Boost.Asio (with its TLS over OpenSSL) and Beast,
// once for the whole module.
// GCC 12 at -O2 with the sanitizers reports a boost::optional inside Beast's
// parser as maybe-uninitialized (a false positive in the library's code,
// inlined here), so that one warning is off for these two includes. Clang
// (the fuzz build) has no such warning.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
