package dev.mce.services;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.Comparator;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.BoltConnectorInternalSettings;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.driver.AuthTokens;
import org.neo4j.driver.Config;
import org.neo4j.driver.Driver;
import org.neo4j.driver.GraphDatabase;
import org.neo4j.driver.Session;
import org.neo4j.harness.Neo4j;
import org.neo4j.harness.Neo4jBuilders;
import org.neo4j.io.ByteUnit;

/**
 * A real Neo4j 5 (community) for development and CI, on the test harness.
 *
 * <p>Everything lives under one home folder (system property {@code mce.neo4j.home}):
 * {@code data/} (the store, kept across restarts), {@code logs/}, {@code run/} (the harness's
 * scratch folder, recreated each start), {@code launcher.lock} (held while this process runs, so
 * two launchers never share a store), {@code launcher.pid} (written at start) and
 * {@code launcher.ready} (written once Bolt answers a query with the configured credentials;
 * holds the Bolt URI). Bolt listens on {@code mce.neo4j.bolt.host}:{@code mce.neo4j.bolt.port}
 * (127.0.0.1:7687 by default), the HTTP and HTTPS connectors are off, usage reporting is off.
 * The user is {@code neo4j} with the password in the environment variable {@code NEO4J_PASSWORD}.
 *
 * <p>SIGTERM (or SIGINT) shuts the DBMS down cleanly, then removes the pid and ready files.
 */
public final class Neo4jLauncher {

    private static final PrintStream LOG = System.err;

    private Neo4jLauncher() {}

    public static void main(String[] args) throws Exception {
        Path home = Path.of(required("mce.neo4j.home")).toAbsolutePath().normalize();
        String host = System.getProperty("mce.neo4j.bolt.host", "127.0.0.1");
        int port = Integer.parseInt(System.getProperty("mce.neo4j.bolt.port", "7687"));
        long pageCacheMiB = Long.parseLong(System.getProperty("mce.neo4j.pagecache.mib", "256"));
        String password = System.getenv("NEO4J_PASSWORD");
        if (password == null || password.isEmpty()) {
            fail("NEO4J_PASSWORD is not set");
        }

        Files.createDirectories(home);
        Path pidFile = home.resolve("launcher.pid");
        Path readyFile = home.resolve("launcher.ready");

        FileChannel lockChannel = FileChannel.open(
                home.resolve("launcher.lock"), StandardOpenOption.CREATE, StandardOpenOption.WRITE);
        FileLock lock = lockChannel.tryLock();
        if (lock == null) {
            fail("another launcher holds " + home.resolve("launcher.lock"));
        }
        // We hold the lock: whatever pid, ready or scratch files are here are stale leftovers
        // of a launcher that was killed.
        Files.deleteIfExists(readyFile);
        writeAtomically(pidFile, Long.toString(ProcessHandle.current().pid()));
        Path run = home.resolve("run");
        deleteTree(run);
        Files.createDirectories(run);
        Files.createDirectories(home.resolve("data"));
        Files.createDirectories(home.resolve("logs"));

        long t0 = System.nanoTime();
        LOG.printf("starting Neo4j: home %s, Bolt %s:%d%n", home, host, port);
        Neo4j neo4j;
        try {
            neo4j = Neo4jBuilders.newInProcessBuilder(run)
                    .withDisabledServer() // no HTTP, no HTTPS
                    .withConfig(BoltConnector.enabled, true)
                    .withConfig(BoltConnector.listen_address, new SocketAddress(host, port))
                    .withConfig(BoltConnector.advertised_address, new SocketAddress(host, port))
                    .withConfig(BoltConnector.encryption_level, BoltConnector.EncryptionLevel.DISABLED)
                    // Bolt waits 5 s, twice, for in-flight work at shutdown; 1 s is plenty here.
                    .withConfig(BoltConnectorInternalSettings.thread_pool_shutdown_wait_time, Duration.ofSeconds(1))
                    .withConfig(BoltConnectorInternalSettings.connection_shutdown_wait_time, Duration.ofSeconds(1))
                    .withConfig(GraphDatabaseSettings.auth_enabled, true)
                    .withConfig(GraphDatabaseSettings.data_directory, home.resolve("data"))
                    .withConfig(GraphDatabaseSettings.logs_directory, home.resolve("logs"))
                    .withConfig(GraphDatabaseSettings.udc_enabled, false)
                    .withConfig(GraphDatabaseSettings.pagecache_memory, ByteUnit.mebiBytes(pageCacheMiB))
                    .build();
        } catch (Throwable e) {
            e.printStackTrace(LOG);
            Files.deleteIfExists(pidFile);
            fail("Neo4j did not start: " + e);
            return;
        }

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            LOG.println("stopping Neo4j");
            try {
                neo4j.close();
                LOG.println("Neo4j stopped cleanly");
            } catch (Throwable e) {
                e.printStackTrace(LOG);
            } finally {
                try {
                    Files.deleteIfExists(readyFile);
                    Files.deleteIfExists(pidFile);
                    lock.release();
                    lockChannel.close();
                } catch (IOException e) {
                    e.printStackTrace(LOG);
                }
                stopped.countDown();
            }
        }, "mce-neo4j-shutdown"));

        LOG.printf("DBMS started after %.1f s%n", (System.nanoTime() - t0) / 1e9);
        try {
            // ALTER USER costs seconds (the first Cypher of the JVM): skipped when this store
            // already has this password, which the Bolt check then proves.
            Path stamp = home.resolve("data").resolve("mce-password.sha256");
            String digest = sha256(password);
            boolean known = Files.exists(stamp) && Files.readString(stamp).trim().equals(digest);
            if (!known) {
                setPassword(neo4j, password);
                LOG.printf("password set after %.1f s%n", (System.nanoTime() - t0) / 1e9);
            }
            try {
                checkBolt(host, port, password);
            } catch (org.neo4j.driver.exceptions.AuthenticationException e) {
                if (!known) {
                    throw e;
                }
                LOG.println("the stored password stamp was stale: " + e.getMessage());
                setPassword(neo4j, password);
                checkBolt(host, port, password);
            }
            writeAtomically(stamp, digest);
        } catch (Throwable e) {
            e.printStackTrace(LOG);
            LOG.println("mce-neo4j-launcher: Neo4j started but does not answer on Bolt: " + e);
            System.exit(1); // runs the shutdown hook: Neo4j stops cleanly
        }
        String uri = "bolt://" + host + ":" + port;
        writeAtomically(readyFile, uri);
        LOG.printf("Neo4j ready on %s after %.1f s%n", uri, (System.nanoTime() - t0) / 1e9);
        stopped.await();
    }

    /** The user neo4j gets the configured password, with no change required at first login. */
    private static void setPassword(Neo4j neo4j, String password) {
        var system = neo4j.databaseManagementService().database("system");
        system.executeTransactionally("ALTER USER neo4j SET PASSWORD CHANGE NOT REQUIRED");
        try {
            system.executeTransactionally(
                    "ALTER USER neo4j SET PASSWORD $password CHANGE NOT REQUIRED",
                    Map.of("password", password));
        } catch (RuntimeException e) {
            // Raised when the password is already this one (a restart on a kept store); the
            // Bolt check that follows says whether the credentials work.
            LOG.println("password unchanged: " + e.getMessage());
        }
    }

    /** A query over Bolt with the credentials clients will use. */
    private static void checkBolt(String host, int port, String password) {
        Config config = Config.builder()
                .withConnectionTimeout(10, TimeUnit.SECONDS)
                .withoutEncryption()
                .build();
        try (Driver driver = GraphDatabase.driver(
                        "bolt://" + host + ":" + port, AuthTokens.basic("neo4j", password), config);
                Session session = driver.session()) {
            long one = session.run("RETURN 1 AS one").single().get("one").asLong();
            if (one != 1) {
                throw new IllegalStateException("RETURN 1 gave " + one);
            }
        }
    }

    private static String sha256(String text) throws java.security.NoSuchAlgorithmException {
        byte[] hash = java.security.MessageDigest.getInstance("SHA-256")
                .digest(text.getBytes(StandardCharsets.UTF_8));
        return java.util.HexFormat.of().formatHex(hash);
    }

    private static void writeAtomically(Path file, String content) throws IOException {
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.writeString(tmp, content + "\n", StandardCharsets.UTF_8);
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    private static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> paths = Files.walk(root)) {
            for (Path p : (Iterable<Path>) paths.sorted(Comparator.reverseOrder())::iterator) {
                Files.deleteIfExists(p);
            }
        }
    }

    private static String required(String property) {
        String value = System.getProperty(property);
        if (value == null || value.isEmpty()) {
            fail("the system property " + property + " is not set");
        }
        return value;
    }

    private static void fail(String message) {
        LOG.println("mce-neo4j-launcher: " + message);
        LOG.flush();
        // halt, not exit: a failed start must not wait on the harness's threads or hooks
        Runtime.getRuntime().halt(1);
    }
}
