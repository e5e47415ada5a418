// SPDX-License-Identifier: Apache-2.0
// The deployment files (docker/compose.yaml, docker/kubernetes.yaml, config/docker.yaml) agree
// with each other and with sluice: no Docker engine or Kubernetes cluster runs here, so these
// tests read the files, and load the configurations they carry with sluice's own loader, in the
// environment the files give them.
#include "sluice/config/loader.hpp"
#include "support/build_paths.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace sluice::config::test {
namespace {

std::string path_of(const std::string& relative) {
    return sluice::test::source_dir() + "/" + relative;
}

/// The documents of a file, by their `kind`.
std::map<std::string, YAML::Node> by_kind(const std::string& relative) {
    std::map<std::string, YAML::Node> out;
    for (const auto& doc : YAML::LoadAllFromFile(path_of(relative))) {
        out[doc["kind"].as<std::string>()] = doc;
    }
    return out;
}

/// An environment holding exactly `variables` (the process's own is never read).
environment only(std::map<std::string, std::string> variables) {
    return
        [variables = std::move(variables)](const std::string& name) -> std::optional<std::string> {
            const auto it = variables.find(name);
            return it == variables.end() ? std::nullopt : std::optional(it->second);
        };
}

YAML::Node container_port(const YAML::Node& container, const std::string& name) {
    for (const auto& port : container["ports"]) {
        if (port["name"].as<std::string>() == name) {
            return port;
        }
    }
    return {};
}

TEST(DeploymentFiles, KubernetesManifestHangsTogether) {
    auto docs = by_kind("docker/kubernetes.yaml");
    ASSERT_EQ(docs.size(), 3u);
    for (const char* kind : {"ConfigMap", "Deployment", "Service"}) {
        ASSERT_TRUE(docs.count(kind)) << kind;
    }
    // The Secret is a file apart, so that applying the manifest never overwrites the password.
    const auto secrets = by_kind("docker/kubernetes-secret.yaml");
    ASSERT_EQ(secrets.size(), 1u);
    ASSERT_TRUE(secrets.count("Secret"));
    docs["Secret"] = secrets.at("Secret");
    const auto deployment = docs["Deployment"];
    const auto pod = deployment["spec"]["template"]["spec"];
    const auto container = pod["containers"][0];
    // A rollout: preStop holds SIGTERM back while the pod leaves the Service's endpoints, then
    // the drain runs; the grace period covers both (the drain's 30 s is checked below).
    const auto pause = container["lifecycle"]["preStop"]["exec"]["command"];
    ASSERT_TRUE(pause && pause.size() == 2u);
    EXPECT_EQ(pause[0].as<std::string>(), "sleep");
    const int grace = pod["terminationGracePeriodSeconds"].as<int>();
    const auto admin = container_port(container, "admin");
    const auto http = container_port(container, "http");
    ASSERT_TRUE(admin && http);
    EXPECT_EQ(container["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
    EXPECT_EQ(container["readinessProbe"]["httpGet"]["port"].as<std::string>(), "admin");
    EXPECT_EQ(container["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");
    EXPECT_EQ(container["livenessProbe"]["httpGet"]["port"].as<std::string>(), "admin");
    EXPECT_EQ(deployment["spec"]["selector"]["matchLabels"]["app"].as<std::string>(),
              deployment["spec"]["template"]["metadata"]["labels"]["app"].as<std::string>());
    EXPECT_EQ(docs["Service"]["spec"]["selector"]["app"].as<std::string>(), "sluice");
    EXPECT_EQ(docs["Service"]["spec"]["ports"][0]["targetPort"].as<std::string>(), "http");

    // The configuration, loaded in the environment the Deployment gives it.
    std::map<std::string, std::string> env;
    for (const auto& variable : container["env"]) {
        env[variable["name"].as<std::string>()] = variable["value"].as<std::string>();
    }
    // The Secret's file, where the pod mounts it.
    std::map<std::string, std::string> mounts;
    for (const auto& mount : container["volumeMounts"]) {
        mounts[mount["name"].as<std::string>()] = mount["mountPath"].as<std::string>();
    }
    std::string secret_volume;
    std::string config_volume;
    for (const auto& volume : pod["volumes"]) {
        if (volume["secret"]) {
            EXPECT_EQ(volume["secret"]["secretName"].as<std::string>(),
                      docs["Secret"]["metadata"]["name"].as<std::string>());
            secret_volume = volume["name"].as<std::string>();
        }
        if (volume["configMap"]) {
            EXPECT_EQ(volume["configMap"]["name"].as<std::string>(),
                      docs["ConfigMap"]["metadata"]["name"].as<std::string>());
            config_volume = volume["name"].as<std::string>();
        }
    }
    ASSERT_TRUE(mounts.count(secret_volume) && mounts.count(config_volume));
    EXPECT_EQ(container["args"][1].as<std::string>(), mounts[config_volume] + "/sluice.yaml");

    const auto text = docs["ConfigMap"]["data"]["sluice.yaml"].as<std::string>();
    std::string secret_key;
    for (const auto& item : docs["Secret"]["stringData"]) {
        secret_key = item.first.as<std::string>();
    }
    const auto password_path = mounts[secret_volume] + "/" + secret_key;
    // The loader reads the password file: put one where the pod would have it, in a temporary
    // tree, by pointing the config at it.
    const auto dir =
        std::filesystem::temp_directory_path() / ("sluice-k8s-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto local_secret = dir / secret_key;
    { std::ofstream(local_secret) << "s3cret\n"; }
    std::string local_text = text;
    const auto at = local_text.find(password_path);
    ASSERT_NE(at, std::string::npos) << "password-file is not the Secret's mounted file";
    local_text.replace(at, password_path.size(), local_secret.string());
    const auto cfg = load_string(local_text, "kubernetes.yaml", only(env));
    EXPECT_EQ(cfg.server.listen.host, "0.0.0.0");
    EXPECT_EQ(cfg.server.listen.port, http["containerPort"].as<int>());
    EXPECT_EQ(cfg.admin.listen.host, "0.0.0.0");
    EXPECT_EQ(cfg.admin.listen.port, admin["containerPort"].as<int>());
    EXPECT_EQ(cfg.rate_limit.store, store_kind::redis);
    EXPECT_EQ(cfg.rate_limit.redis.host, env["SLUICE_REDIS_HOST"]);
    EXPECT_EQ(cfg.rate_limit.redis.password, "s3cret");
    EXPECT_GE(grace, pause[1].as<int>() + cfg.server.drain_timeout.count() / 1000);
    // Workers fixed, not one per core of whatever node the pod lands on.
    EXPECT_EQ(cfg.server.workers, 2u);
    // As shipped no peer is trusted: a whole network would let its pods pick their own buckets.
    EXPECT_TRUE(cfg.server.trusted_proxies.empty());
    std::filesystem::remove_all(dir);
}

TEST(DeploymentFiles, ComposeStartsSluiceOnAHealthyRedisWithItsEnvironment) {
    const auto compose = YAML::LoadFile(path_of("docker/compose.yaml"));
    const auto services = compose["services"];
    const auto sluice = services["sluice"];
    EXPECT_EQ(sluice["depends_on"]["redis"]["condition"].as<std::string>(), "service_healthy");
    EXPECT_TRUE(services["redis"]["healthcheck"]);
    EXPECT_TRUE(sluice["healthcheck"]);
    std::map<std::string, std::string> env;
    for (const auto& item : sluice["environment"]) {
        env[item.first.as<std::string>()] = item.second.as<std::string>();
    }
    const auto cfg = load_file(path_of("config/docker.yaml"), only(env));
    EXPECT_EQ(cfg.server.listen.host, "0.0.0.0");
    EXPECT_EQ(cfg.upstream.host, "upstream");
    EXPECT_TRUE(services["upstream"]);
    EXPECT_EQ(cfg.rate_limit.store, store_kind::redis);
    EXPECT_EQ(cfg.rate_limit.redis.host, "redis");
}

// The Dockerfile's `docker run` example: only the upstream set, the memory store.
TEST(DeploymentFiles, TheImagesConfigNeedsOnlyTheUpstream) {
    {
        const auto cfg =
            load_file(path_of("config/docker.yaml"),
                      only({{"SLUICE_UPSTREAM_URL", "http://host.docker.internal:9000"}}));
        EXPECT_EQ(cfg.server.listen.host, "0.0.0.0");
        EXPECT_EQ(cfg.upstream.host, "host.docker.internal");
        EXPECT_EQ(cfg.rate_limit.store, store_kind::memory);
    }
    // Without it, the error names the variable.
    try {
        load_file(path_of("config/docker.yaml"), only({}));
        FAIL() << "loaded without SLUICE_UPSTREAM_URL";
    } catch (const config_error& e) {
        EXPECT_NE(std::string(e.what()).find("SLUICE_UPSTREAM_URL"), std::string::npos) << e.what();
    }
}

} // namespace
} // namespace sluice::config::test
