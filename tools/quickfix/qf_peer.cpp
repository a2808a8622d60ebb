// qf_peer: a small QuickFIX/C++ program used by tickwire as a real counterparty.
//
// It exists for three purposes:
//   * interop tests (tickwire's FIX engine against an unmodified QuickFIX, both directions),
//   * recording QuickFIX's exact session-layer behaviour (tools/quickfix/probe.py),
//   * the QuickFIX reference "algo" of the tick-to-trade benchmark (BENCHMARKING.md family D).
//
// Usage: qf_peer --config FILE --app echo|at|algo|log [--store file|memory] [--log stdout|none]
//                [--order-sender COMPID] [--define NAME=VALUE]...
//
// The program runs a SocketAcceptor or a SocketInitiator depending on ConnectionType in the
// settings file (all sessions must agree); with SocketUseSSL=Y in [DEFAULT] it runs QuickFIX's
// SSLSocketAcceptor / SSLSocketInitiator instead (QuickFIX 1.15.1 has no such setting: the
// program picks the class; tickwire's key is used here so that one file drives both). It is built against the system QuickFIX
// (Debian's libquickfix-dev) by scripts/install-quickfix.sh; no QuickFIX code is copied here.
//
// Output (stdout, flushed per line, so tests can read it while the program runs):
//   IN <session> <message with | for SOH>     every message QuickFIX read from the wire
//   OUT <session> <message with | for SOH>    every message QuickFIX wrote to the wire
//   EVENT <session> <text>                    QuickFIX's own session events
//   READY <acceptor|initiator>                once the engine has started
//   CPU user_us=<n> sys_us=<n> total_us=<n> md_in=<n> orders_out=<n>
//                                             at exit and on SIGUSR1
// With --log none (the default for --app algo) only READY and CPU lines are printed, so the
// benchmark measures the engine, not terminal output.

#include <quickfix/Application.h>
#include <quickfix/FieldConvertors.h>
#include <quickfix/FileStore.h>
#include <quickfix/Log.h>
#include <quickfix/Message.h>
#include <quickfix/MessageStore.h>
#include <quickfix/Session.h>
#include <quickfix/SessionSettings.h>
#include <quickfix/SocketAcceptor.h>
#include <quickfix/SocketInitiator.h>
// Debian's libquickfix is built with OpenSSL; its SSL headers want HAVE_SSL.
#ifndef HAVE_SSL
#define HAVE_SSL 1
#endif
#include <quickfix/SSLSocketAcceptor.h>
#include <quickfix/SSLSocketInitiator.h>
#include <quickfix/fix44/MarketDataIncrementalRefresh.h>
#include <quickfix/fix44/NewOrderSingle.h>

// QuickFIX 1.15 (Debian) declares callbacks with dynamic exception specifications
// (throw(...), needs C++14 or older); 1.16 wraps them in the EXCEPT macro.
#ifndef EXCEPT
#define EXCEPT(...) throw(__VA_ARGS__)
#endif

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>

namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_report = 0;

void on_stop_signal(int) { g_stop = 1; }
void on_report_signal(int) { g_report = 1; }

std::mutex g_out_mutex;

// Prints one line to stdout and flushes it; the lock keeps lines from different
// QuickFIX threads whole.
void print_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_out_mutex);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string with_bars(std::string text) {
  for (char& c : text) {
    if (c == '\x01') c = '|';
  }
  return text;
}

// A QuickFIX Log that writes one line per message or event to stdout.
class StdoutLog : public FIX::Log {
 public:
  explicit StdoutLog(std::string session) : session_(std::move(session)) {}
  void clear() override {}
  void backup() override {}
  void onIncoming(const std::string& msg) override { print_line("IN " + session_ + " " + with_bars(msg)); }
  void onOutgoing(const std::string& msg) override { print_line("OUT " + session_ + " " + with_bars(msg)); }
  void onEvent(const std::string& text) override { print_line("EVENT " + session_ + " " + text); }

 private:
  std::string session_;
};

class StdoutLogFactory : public FIX::LogFactory {
 public:
  FIX::Log* create() override { return new StdoutLog("GLOBAL"); }
  FIX::Log* create(const FIX::SessionID& id) override { return new StdoutLog(id.toString()); }
  void destroy(FIX::Log* log) override { delete log; }
};

class NullLogFactory : public FIX::LogFactory {
 public:
  FIX::Log* create() override { return new FIX::NullLog(); }
  FIX::Log* create(const FIX::SessionID&) override { return new FIX::NullLog(); }
  void destroy(FIX::Log* log) override { delete log; }
};

enum class AppKind { Log, Echo, At, Algo };

std::atomic<unsigned long long> g_md_in{0};
std::atomic<unsigned long long> g_orders_out{0};

// The application callbacks. `log` only logs (through the Log above); `echo` answers
// NewOrderSingle with an ExecutionReport and sends Email back; `at` behaves as QuickFIX's own
// acceptance-test application (the conformance suite's server): NewOrderSingle and
// SecurityDefinition are sent back as received (the whole parsed message, header fields
// included, through sendToTarget), a PossResend=Y order whose ClOrdID was already seen on
// that session is ignored (the ClOrdIDs are forgotten at logout), a FIXT Logon's
// DefaultApplVerID becomes the session's own; `algo` turns each MarketDataIncrementalRefresh entry into a
// NewOrderSingle on the order session.
class PeerApp : public FIX::Application {
 public:
  PeerApp(AppKind kind, std::string order_sender) : kind_(kind), order_sender_(std::move(order_sender)) {}

  void onCreate(const FIX::SessionID& id) override {
    if (kind_ == AppKind::Algo && id.getSenderCompID().getValue() == order_sender_) {
      order_session_ = id;
      have_order_session_ = true;
    }
  }
  void onLogon(const FIX::SessionID&) override {}
  // As QuickFIX's acceptance-test application (its onLogout resets the cracker's set):
  // the ClOrdIDs seen are forgotten when a session logs out.
  void onLogout(const FIX::SessionID&) override { at_seen_.clear(); }
  void toAdmin(FIX::Message&, const FIX::SessionID&) override {}
  void toApp(FIX::Message&, const FIX::SessionID&) EXCEPT(FIX::DoNotSend) override {}
  void fromAdmin(const FIX::Message& message, const FIX::SessionID& id)
      EXCEPT(FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue, FIX::RejectLogon) override {
    // As QuickFIX's acceptance-test application: a FIXT Logon's DefaultApplVerID becomes
    // the session's own (the Logon answer carries it).
    if (kind_ != AppKind::At) return;
    if (message.getHeader().getField(FIX::FIELD::MsgType) != "A") return;
    if (!message.isSetField(FIX::FIELD::DefaultApplVerID)) return;
    if (FIX::Session* s = FIX::Session::lookupSession(id)) {
      s->setSenderDefaultApplVerID(message.getField(FIX::FIELD::DefaultApplVerID));
    }
  }

  void fromApp(const FIX::Message& message, const FIX::SessionID& id)
      EXCEPT(FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue,
             FIX::UnsupportedMessageType) override {
    const std::string& type = message.getHeader().getField(FIX::FIELD::MsgType);
    switch (kind_) {
      case AppKind::Log:
        return;
      case AppKind::Echo:
        if (type == "D") {
          echo_order(message, id);
        } else if (type == "C") {
          echo_email(message, id);
        } else {
          // As tickwire's own `--app echo`: everything else is answered as unsupported
          // (QuickFIX turns this into a BusinessMessageReject, or a Reject before FIX.4.2).
          throw FIX::UnsupportedMessageType();
        }
        return;
      case AppKind::At:
        if (type == "D") {
          at_order(message, id);
        } else if (type == "d") {
          FIX::Message echo(message);
          FIX::Session::sendToTarget(echo, id);
        } else {
          throw FIX::UnsupportedMessageType();
        }
        return;
      case AppKind::Algo:
        if (type == "X") on_market_data(message);
        return;
    }
  }

 private:
  void echo_order(const FIX::Message& order, const FIX::SessionID& id) {
    const std::string begin = id.getBeginString().getValue();
    ++exec_counter_;
    FIX::Message report;
    report.getHeader().setField(FIX::FIELD::MsgType, "8");
    report.setField(FIX::FIELD::OrderID, "O" + std::to_string(exec_counter_));
    // ExecIDs stay unique across restarts of qf_peer (the file store keeps the session).
    report.setField(FIX::FIELD::ExecID, exec_prefix_ + std::to_string(exec_counter_));
    // ExecTransType exists up to FIX.4.2; ExecType from FIX.4.1 on.
    if (begin == "FIX.4.0" || begin == "FIX.4.1" || begin == "FIX.4.2") {
      report.setField(FIX::FIELD::ExecTransType, "0");
    }
    if (begin != "FIX.4.0") report.setField(FIX::FIELD::ExecType, "0");
    report.setField(FIX::FIELD::OrdStatus, "0");
    for (int tag : {FIX::FIELD::ClOrdID, FIX::FIELD::Symbol, FIX::FIELD::Side, FIX::FIELD::OrderQty}) {
      if (order.isSetField(tag)) report.setField(tag, order.getField(tag));
    }
    if (begin != "FIX.4.0") report.setField(FIX::FIELD::LeavesQty,
                                            order.isSetField(FIX::FIELD::OrderQty)
                                                ? order.getField(FIX::FIELD::OrderQty)
                                                : std::string("0"));
    report.setField(FIX::FIELD::CumQty, "0");
    report.setField(FIX::FIELD::AvgPx, "0");
    if (begin == "FIX.4.0" || begin == "FIX.4.1") {
      report.setField(FIX::FIELD::LastShares, "0");
      report.setField(FIX::FIELD::LastPx, "0");
    }
    FIX::Session::sendToTarget(report, id);
  }

  // QuickFIX's acceptance-test application: the parsed order goes back as is (sendToTarget
  // sets 8/49/56, Session::send drops 43 and 122 and fills 34/52); a PossResend=Y order whose
  // ClOrdID this session already saw is ignored.
  void at_order(const FIX::Message& order, const FIX::SessionID& id) {
    FIX::Message echo(order);
    bool poss_resend = false;
    if (order.getHeader().isSetField(FIX::FIELD::PossResend)) {
      poss_resend = order.getHeader().getField(FIX::FIELD::PossResend) == "Y";
    }
    const std::string cl_ord_id = order.isSetField(FIX::FIELD::ClOrdID) ? order.getField(FIX::FIELD::ClOrdID) : "";
    const std::string key = cl_ord_id + "\x01" + id.toString();
    if (poss_resend && at_seen_.count(key)) return;
    at_seen_.insert(key);
    FIX::Session::sendToTarget(echo, id);
  }

  void echo_email(const FIX::Message& email, const FIX::SessionID& id) {
    FIX::Message reply(email);  // body and groups as received
    reply.getHeader().clear();  // the session fills 8/49/56/34/52 itself
    reply.getTrailer().clear();
    reply.getHeader().setField(FIX::FIELD::MsgType, "C");
    FIX::Session::sendToTarget(reply, id);
  }

  void on_market_data(const FIX::Message& message) {
    g_md_in.fetch_add(1, std::memory_order_relaxed);
    if (!have_order_session_) return;
    FIX44::MarketDataIncrementalRefresh::NoMDEntries entry;
    FIX::NoMDEntries count;
    message.getField(count);
    for (int i = 1; i <= count.getValue(); ++i) {
      message.getGroup(i, entry);
      FIX::MDEntryType entry_type;
      FIX::Symbol symbol;
      FIX::MDEntryPx price;
      FIX::MDEntrySize size;
      FIX::MDEntryID corr_id;
      entry.get(entry_type);
      entry.get(symbol);
      entry.get(price);
      entry.get(size);
      entry.get(corr_id);
      FIX44::NewOrderSingle order(FIX::ClOrdID(corr_id.getValue()),
                                  FIX::Side(entry_type.getValue() == FIX::MDEntryType_BID ? FIX::Side_BUY
                                                                                           : FIX::Side_SELL),
                                  FIX::TransactTime(3), FIX::OrdType(FIX::OrdType_LIMIT));  // 60 with ms
      order.set(symbol);
      order.set(FIX::OrderQty(size.getValue()));
      order.set(FIX::Price(price.getValue()));
      order.set(FIX::TimeInForce(FIX::TimeInForce_DAY));
      FIX::Session::sendToTarget(order, order_session_);
      g_orders_out.fetch_add(1, std::memory_order_relaxed);
    }
  }

  AppKind kind_;
  std::string order_sender_;
  FIX::SessionID order_session_;
  bool have_order_session_ = false;
  unsigned long long exec_counter_ = 0;
  std::set<std::string> at_seen_;
  std::string exec_prefix_ = "E" + std::to_string(static_cast<long long>(time(nullptr))) + "-";
};

void print_cpu() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const long long user = static_cast<long long>(usage.ru_utime.tv_sec) * 1000000 + usage.ru_utime.tv_usec;
  const long long sys = static_cast<long long>(usage.ru_stime.tv_sec) * 1000000 + usage.ru_stime.tv_usec;
  print_line("CPU user_us=" + std::to_string(user) + " sys_us=" + std::to_string(sys) +
             " total_us=" + std::to_string(user + sys) + " md_in=" + std::to_string(g_md_in.load()) +
             " orders_out=" + std::to_string(g_orders_out.load()));
}

// Reads the settings file and replaces every ${NAME} given with --define NAME=VALUE, so the
// example settings files can take a port or a directory as a parameter.
bool render_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& defines,
                   std::string& out, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read " + path;
    return false;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  out = buffer.str();
  for (const auto& def : defines) {
    const std::string key = "${" + def.first + "}";
    for (std::string::size_type at = out.find(key); at != std::string::npos; at = out.find(key, at)) {
      out.replace(at, key.size(), def.second);
      at += def.second.size();
    }
  }
  const std::string::size_type left = out.find("${");
  if (left != std::string::npos) {
    error = "settings file has an undefined parameter: " + out.substr(left, out.find('}', left) - left + 1) +
            " (give it with --define NAME=VALUE)";
    return false;
  }
  return true;
}

int usage_error(const std::string& why) {
  std::cerr << "qf_peer: " << why << "\n"
            << "usage: qf_peer --config FILE --app echo|at|algo|log [--store file|memory] [--log stdout|none]\n"
            << "              [--order-sender COMPID]   (algo: SenderCompID of the order session, "
               "default ALGO_OE)\n"
            << "              [--define NAME=VALUE]...  (replaces ${NAME} in the settings file)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config;
  std::string app_name;
  std::string store = "file";
  std::string log_mode;
  std::string order_sender = "ALGO_OE";
  std::vector<std::pair<std::string, std::string>> defines;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    bool ok = true;
    if (arg == "--config") ok = value(config);
    else if (arg == "--app") ok = value(app_name);
    else if (arg == "--store") ok = value(store);
    else if (arg == "--log") ok = value(log_mode);
    else if (arg == "--order-sender") ok = value(order_sender);
    else if (arg == "--define") {
      std::string def;
      ok = value(def);
      const std::string::size_type eq = def.find('=');
      if (ok && (eq == std::string::npos || eq == 0)) return usage_error("--define needs NAME=VALUE");
      if (ok) defines.emplace_back(def.substr(0, eq), def.substr(eq + 1));
    }
    else return usage_error("unknown argument " + arg);
    if (!ok) return usage_error("missing value for " + arg);
  }
  if (config.empty()) return usage_error("--config is required");
  AppKind kind;
  if (app_name == "log") kind = AppKind::Log;
  else if (app_name == "echo") kind = AppKind::Echo;
  else if (app_name == "at") kind = AppKind::At;
  else if (app_name == "algo") kind = AppKind::Algo;
  else return usage_error("--app must be echo, at, algo or log");
  if (store != "file" && store != "memory") return usage_error("--store must be file or memory");
  if (log_mode.empty()) log_mode = kind == AppKind::Algo ? "none" : "stdout";
  if (log_mode != "stdout" && log_mode != "none") return usage_error("--log must be stdout or none");

  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGUSR1, on_report_signal);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    std::string rendered, error;
    if (!render_config(config, defines, rendered, error)) return usage_error(error);
    FIX::SessionSettings settings;
    std::istringstream rendered_stream(rendered);
    rendered_stream >> settings;
    // Every session must name the same ConnectionType ([DEFAULT] or per session).
    std::string connection_type;
    for (const FIX::SessionID& id : settings.getSessions()) {
      const std::string type = settings.get(id).getString("ConnectionType");
      if (!connection_type.empty() && type != connection_type) {
        return usage_error("all sessions must have the same ConnectionType");
      }
      connection_type = type;
    }
    if (connection_type != "acceptor" && connection_type != "initiator") {
      return usage_error("ConnectionType must be acceptor or initiator");
    }

    PeerApp app(kind, order_sender);
    std::unique_ptr<FIX::MessageStoreFactory> store_factory;
    if (store == "file") store_factory.reset(new FIX::FileStoreFactory(settings));
    else store_factory.reset(new FIX::MemoryStoreFactory());
    std::unique_ptr<FIX::LogFactory> log_factory;
    if (log_mode == "stdout") log_factory.reset(new StdoutLogFactory());
    else log_factory.reset(new NullLogFactory());

    std::unique_ptr<FIX::Acceptor> acceptor;
    std::unique_ptr<FIX::Initiator> initiator;
    const FIX::Dictionary& defaults = settings.get();
    const bool ssl = defaults.has("SocketUseSSL") && defaults.getString("SocketUseSSL") == "Y";
    if (connection_type == "acceptor") {
      if (ssl) acceptor.reset(new FIX::SSLSocketAcceptor(app, *store_factory, settings, *log_factory));
      else acceptor.reset(new FIX::SocketAcceptor(app, *store_factory, settings, *log_factory));
      acceptor->start();
    } else {
      if (ssl) initiator.reset(new FIX::SSLSocketInitiator(app, *store_factory, settings, *log_factory));
      else initiator.reset(new FIX::SocketInitiator(app, *store_factory, settings, *log_factory));
      initiator->start();
    }
    print_line("READY " + connection_type + (ssl ? " ssl" : ""));

    while (!g_stop) {
      if (g_report) {
        g_report = 0;
        print_cpu();
      }
      usleep(20000);
    }
    if (acceptor) acceptor->stop();
    if (initiator) initiator->stop();
    print_cpu();
  } catch (const std::exception& e) {
    std::cerr << "qf_peer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
