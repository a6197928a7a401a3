// File: tests/operator/kube/kube_tls_test.cpp
// The client over TLS against a small OpenSSL server on 127.0.0.1 with certificates made at run
// time (a CA, a server certificate for IP 127.0.0.1, a client certificate): the CA file and the
// client certificate are used, verification is on by default (an unknown CA or a host name the
// certificate does not name fails as a transport error), and insecure-skip-tls-verify skips it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "operator/kube/kube_client.h"

namespace qsync::kube {
namespace {

namespace fs = std::filesystem;

struct KeyAndCert {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
};

EVP_PKEY* make_key() { return EVP_EC_gen("P-256"); }  // EC: key generation is quick

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `common_name`, signed by `issuer` (itself when null).
KeyAndCert make_cert(const std::string& common_name, const KeyAndCert* issuer, bool is_ca, const char* san) {
  KeyAndCert out{make_key(), X509_new()};
  X509_set_version(out.cert, 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(out.cert), serial++);
  X509_gmtime_adj(X509_getm_notBefore(out.cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(out.cert), 24 * 3600);
  X509_set_pubkey(out.cert, out.key);
  X509_NAME* name = X509_get_subject_name(out.cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                             -1, 0);
  X509* issuer_cert = issuer ? issuer->cert : out.cert;
  X509_set_issuer_name(out.cert, X509_get_subject_name(issuer_cert));
  add_extension(out.cert, issuer_cert, NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "CA:FALSE");
  if (is_ca) add_extension(out.cert, issuer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  if (san != nullptr) add_extension(out.cert, issuer_cert, NID_subject_alt_name, san);
  X509_sign(out.cert, issuer ? issuer->key : out.key, EVP_sha256());
  return out;
}

void write_pem(const std::string& path, const KeyAndCert& kc, bool key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (key) PEM_write_PrivateKey(f, kc.key, nullptr, nullptr, 0, nullptr, nullptr);
  else PEM_write_X509(f, kc.cert);
  std::fclose(f);
}

// One-request-per-connection HTTPS server answering {"ok": true, "client": CN of the client cert}.
class TlsServer {
 public:
  TlsServer(const std::string& dir) {
    ca_ = make_cert("qsync-test-ca", nullptr, true, nullptr);
    KeyAndCert server = make_cert("qsync-test-server", &ca_, false, "IP:127.0.0.1");
    KeyAndCert client = make_cert("qsync-test-client", &ca_, false, nullptr);
    ca_file = dir + "/ca.crt";
    client_cert_file = dir + "/client.crt";
    client_key_file = dir + "/client.key";
    write_pem(ca_file, ca_, false);
    write_pem(client_cert_file, client, false);
    write_pem(client_key_file, client, true);

    ctx_ = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(ctx_, server.cert);
    SSL_CTX_use_PrivateKey(ctx_, server.key);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), ca_.cert);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);  // ask for a client certificate, optional
    X509_free(server.cert);
    EVP_PKEY_free(server.key);
    X509_free(client.cert);
    EVP_PKEY_free(client.key);

    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 8);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~TlsServer() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    thread_.join();
    SSL_CTX_free(ctx_);
    X509_free(ca_.cert);
    EVP_PKEY_free(ca_.key);
  }
  std::string last_client() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_client_;
  }

  int port = 0;
  std::string ca_file, client_cert_file, client_key_file;

 private:
  void serve() {
    while (!stopping_) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      timeval timeout{5, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      SSL* ssl = SSL_new(ctx_);
      SSL_set_fd(ssl, fd);
      if (SSL_accept(ssl) == 1) {
        std::string request;
        char buffer[4096];
        while (request.find("\r\n\r\n") == std::string::npos) {
          int n = SSL_read(ssl, buffer, sizeof buffer);
          if (n <= 0) break;
          request.append(buffer, static_cast<size_t>(n));
        }
        std::string client;
        if (X509* peer = SSL_get1_peer_certificate(ssl)) {
          char cn[256] = {};
          X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn);
          client = cn;
          X509_free(peer);
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          last_client_ = client;
        }
        std::string body = R"({"ok":true})";
        std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body;
        SSL_write(ssl, answer.data(), static_cast<int>(answer.size()));
        SSL_shutdown(ssl);
      }
      ERR_clear_error();
      SSL_free(ssl);
      ::close(fd);
    }
  }

  KeyAndCert ca_;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex mu_;
  std::string last_client_;
};

class KubeTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "kube-tls-test-XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
    server_ = std::make_unique<TlsServer>(dir_);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }
  KubeConfig config(const std::string& host = "127.0.0.1") const {
    KubeConfig c;
    c.server = "https://" + host + ":" + std::to_string(server_->port);
    c.source = "tls test";
    return c;
  }
  static ClientOptions options() {
    ClientOptions o;
    o.qps = 0;
    o.request_timeout_seconds = 10;
    return o;
  }

  std::string dir_;
  std::unique_ptr<TlsServer> server_;
};

TEST_F(KubeTlsTest, VerifiesWithTheCaFileAndPresentsTheClientCertificate) {
  KubeConfig c = config();
  c.ca_file = server_->ca_file;
  c.client_cert_file = server_->client_cert_file;
  c.client_key_file = server_->client_key_file;
  KubeClient client(c, options());
  EXPECT_EQ(client.request("GET", "/version")["ok"], true);
  EXPECT_EQ(server_->last_client(), "qsync-test-client");
}

TEST_F(KubeTlsTest, UnknownCaFailsVerificationByDefault) {
  KubeClient client(config(), options());
  try {
    client.request("GET", "/version");
    FAIL() << "a server signed by an unknown CA was accepted";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_transport(e)) << e.what();
    EXPECT_NE(std::string(e.what()).find("handshake"), std::string::npos) << e.what();
  }
}

TEST_F(KubeTlsTest, HostNameTheCertificateDoesNotNameFails) {
  KubeConfig c = config("localhost");  // the certificate names only IP 127.0.0.1
  c.ca_file = server_->ca_file;
  KubeClient client(c, options());
  try {
    client.request("GET", "/version");
    FAIL() << "a certificate for another host was accepted";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_transport(e)) << e.what();
    EXPECT_NE(std::string(e.what()).find("handshake"), std::string::npos) << e.what();
  }
}

TEST_F(KubeTlsTest, InsecureSkipTlsVerifyAcceptsAnyServer) {
  KubeConfig c = config();
  c.insecure_skip_tls_verify = true;
  KubeClient client(c, options());
  EXPECT_EQ(client.request("GET", "/version")["ok"], true);
  EXPECT_EQ(server_->last_client(), "");  // no client certificate configured
}

}  // namespace
}  // namespace qsync::kube
