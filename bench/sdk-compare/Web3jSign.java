// web3j 4.13.0: signs EIP-155 legacy transfers with nonces 0..txs on one thread.
// Usage: java Web3jSign KEY TO VALUE GAS GAS_PRICE CHAIN_ID TXS RUNS OUT
// Prints the median tx/s of RUNS timed passes (after one untimed warm-up pass, for the
// JIT) and writes the last pass to OUT, one 0x-hex tx per line.
import java.io.BufferedWriter;
import java.math.BigInteger;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.web3j.crypto.Credentials;
import org.web3j.crypto.RawTransaction;
import org.web3j.crypto.TransactionEncoder;
import org.web3j.utils.Numeric;

public final class Web3jSign {
    public static void main(String[] args) throws Exception {
        Credentials credentials = Credentials.create(args[0]);
        String to = args[1];
        BigInteger value = new BigInteger(args[2]);
        BigInteger gas = new BigInteger(args[3]);
        BigInteger gasPrice = new BigInteger(args[4]);
        long chainId = Long.parseLong(args[5]);
        int txs = Integer.parseInt(args[6]);
        int runs = Integer.parseInt(args[7]);
        byte[][] signed = new byte[txs][];
        double[] rates = new double[runs];
        for (int run = -1; run < runs; run++) {
            long start = System.nanoTime();
            for (int nonce = 0; nonce < txs; nonce++) {
                RawTransaction tx = RawTransaction.createEtherTransaction(
                        BigInteger.valueOf(nonce), gasPrice, gas, to, value);
                signed[nonce] = TransactionEncoder.signMessage(tx, chainId, credentials);
            }
            long elapsed = System.nanoTime() - start;
            if (run >= 0) {
                rates[run] = txs / (elapsed / 1e9);
            }
        }
        Arrays.sort(rates);
        try (BufferedWriter out = Files.newBufferedWriter(Path.of(args[8]))) {
            for (byte[] tx : signed) {
                out.write(Numeric.toHexString(tx));
                out.write('\n');
            }
        }
        System.out.printf("%.0f%n", rates[runs / 2]);
    }
}
