// net/internal/asio.h — the one way net/ includes Boost.Asio and Beast
// (private to net/). Asio and Beast are compiled once, in asio_impl.cpp
// (separate compilation: BOOST_ASIO_SEPARATE_COMPILATION and
// BOOST_BEAST_SEPARATE_COMPILATION are defined for every file of the module
// by its CMakeLists.txt), so each file that includes this pays for the
// declarations only. No other module sees these headers.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

namespace strata::net::internal {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;

}  // namespace strata::net::internal
