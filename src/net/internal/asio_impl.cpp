// The compiled part of Boost.Asio and Beast, once for the whole module.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
