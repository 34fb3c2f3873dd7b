// pytorch/examples' word_language_model/main.py: a word-level language model (--model
// LSTM, GRU, RNN_TANH, RNN_RELU or Transformer) trained by truncated backpropagation through time (--bptt), plain SGD by
// hand with gradient clipping, the learning rate divided by 4 whenever the validation loss
// does not improve. WikiText-2 is not on this machine: the corpus is a text file (--data,
// by default Debian's /usr/share/common-licenses/GPL-3), its lines split 80/10/10 into
// training, validation and test text, words separated by white space, <eos> at each line's end.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "examples/pytorch/common.h"
#include "examples/pytorch/word_language_model/model.h"

using ember::Tensor;

namespace {

// data.py's Dictionary and Corpus, over one file split by lines.
struct Corpus {
  std::map<std::string, int64_t> word2idx;
  std::vector<std::string> idx2word;
  std::vector<int64_t> train, valid, test;

  explicit Corpus(const std::string& path) {
    std::ifstream in(path);
    EMBER_CHECK(in, "word_language_model: cannot read ", path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    const size_t n = lines.size(), a = n * 8 / 10, b = n * 9 / 10;
    for (size_t i = 0; i < n; ++i) tokenize(lines[i], i < a ? train : i < b ? valid : test);
  }
  int64_t add_word(const std::string& w) {
    auto [it, added] = word2idx.emplace(w, static_cast<int64_t>(idx2word.size()));
    if (added) idx2word.push_back(w);
    return it->second;
  }
  void tokenize(const std::string& line, std::vector<int64_t>& ids) {
    std::istringstream words(line);
    for (std::string w; words >> w;) ids.push_back(add_word(w));
    ids.push_back(add_word("<eos>"));
  }
};

// [len / bsz, bsz]: the sequence cut into bsz columns (the remainder dropped).
Tensor batchify(const std::vector<int64_t>& ids, int64_t bsz, ember::Device device) {
  const int64_t nbatch = static_cast<int64_t>(ids.size()) / bsz;
  std::vector<double> v(ids.begin(), ids.begin() + nbatch * bsz);
  return ember::tensor(v, {bsz, nbatch}, ember::kInt64).t().contiguous().to(device);
}

std::pair<Tensor, Tensor> get_batch(const Tensor& source, int64_t i, int64_t bptt) {
  const int64_t seq_len = std::min(bptt, source.size(0) - 1 - i);
  return {source.narrow(0, i, seq_len), source.narrow(0, i + 1, seq_len).reshape({-1})};
}

}  // namespace

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_word_language_model", [&] {
    CLI::App app{"pytorch/examples' word_language_model in ember: a word-level language model"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 40;
    flags.lr = 20;
    flags.batch_size = 20;
    std::string data = "/usr/share/common-licenses/GPL-3";
    int64_t emsize = 200, nhid = 200, nlayers = 2, nhead = 2, bptt = 35;
    double clip = 0.25, dropout = 0.2;
    std::string model_type = "LSTM";
    bool tied = false;
    ember::pt::add_flags(app, flags, /*with_data=*/false);
    app.add_option("--data", data, "text file of the corpus")->capture_default_str();
    app.add_option("--model", model_type, "type of network (RNN_TANH, RNN_RELU, LSTM, GRU, Transformer)")
        ->check(CLI::IsMember({"RNN_TANH", "RNN_RELU", "LSTM", "GRU", "Transformer"}))->capture_default_str();
    app.add_flag("--tied", tied, "tie the word embedding and softmax weights");
    app.add_option("--emsize", emsize, "size of word embeddings")->check(CLI::Range(int64_t{2}, int64_t{65536}).description(""))->type_name("INT in [2, 65536]")->capture_default_str();
    app.add_option("--nhid", nhid, "number of hidden units per layer")->check(CLI::Range(int64_t{1}, int64_t{65536}).description(""))->type_name("INT in [1, 65536]")->capture_default_str();
    app.add_option("--nlayers", nlayers, "number of layers")->check(CLI::Range(int64_t{1}, int64_t{1024}).description(""))->type_name("INT in [1, 1024]")->capture_default_str();
    app.add_option("--nhead", nhead, "the number of heads in the encoder")->check(CLI::Range(int64_t{1}, int64_t{1024}).description(""))->type_name("INT in [1, 1024]")->capture_default_str();
    app.add_option("--bptt", bptt, "sequence length")->check(CLI::Range(int64_t{1}, int64_t{5000}).description(""))->type_name("INT in [1, 5000]")->capture_default_str();
    app.add_option("--clip", clip, "gradient clipping")->check(ember::pt::finite_range(0.0, 1e6))->type_name("FLOAT in [0, 1e6]")->capture_default_str();
    app.add_option("--dropout", dropout, "dropout applied to layers (0 = no dropout)")->check(ember::pt::finite_range(0.0, 1.0))->type_name("FLOAT in [0, 1]")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    const Corpus corpus(data);
    const int64_t eval_batch_size = 10;
    const Tensor train_data = batchify(corpus.train, flags.batch_size, device);
    const Tensor val_data = batchify(corpus.valid, eval_batch_size, device);
    const Tensor test_data = batchify(corpus.test, eval_batch_size, device);
    const auto ntokens = static_cast<int64_t>(corpus.idx2word.size());
    std::printf("corpus %s: %lld words, %lld distinct\n", data.c_str(), static_cast<long long>(corpus.train.size() + corpus.valid.size() + corpus.test.size()), static_cast<long long>(ntokens));
    using namespace pt_word_language_model;
    const bool transformer = model_type == "Transformer";
    std::shared_ptr<ember::nn::Module> model;
    if (transformer) {
      model = std::make_shared<TransformerModel>(ntokens, emsize, nhead, nhid, nlayers, dropout);
    } else {
      model = std::make_shared<RNNModel>(model_type, ntokens, emsize, nhid, nlayers, dropout, tied);
    }
    model->to(device);
    ember::nn::NLLLoss criterion;
    // One batch through the model: the Transformer's forward(src), or the RNN's with the
    // state carried over (repackaged: cut from the previous batch's graph).
    Hidden hidden;
    auto run = [&](const Tensor& input) {
      if (transformer) return (*std::static_pointer_cast<TransformerModel>(model))(input).view({-1, ntokens});
      hidden = {hidden.h.detach(), hidden.c.defined() ? hidden.c.detach() : Tensor()};
      Tensor output;
      std::tie(output, hidden) = (*std::static_pointer_cast<RNNModel>(model))(input, hidden);
      return output;
    };
    auto init_hidden = [&](int64_t bsz) {
      if (!transformer) hidden = std::static_pointer_cast<RNNModel>(model)->init_hidden(bsz);
    };

    auto evaluate = [&](const Tensor& source) {
      model->eval();
      ember::NoGradGuard no_grad;
      double total_loss = 0;
      init_hidden(eval_batch_size);
      for (int64_t i = 0; i < source.size(0) - 1; i += bptt) {
        auto [input, targets] = get_batch(source, i, bptt);
        const Tensor output = run(input);
        total_loss += static_cast<double>(input.size(0)) * criterion(output, targets).item<double>();
        if (flags.dry_run) break;
      }
      return total_loss / static_cast<double>(source.size(0) - 1);
    };

    double lr = flags.lr, best_val_loss = INFINITY;
    for (int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
      model->train();
      double total_loss = 0;
      int64_t batches = 0;
      init_hidden(flags.batch_size);
      for (int64_t i = 0; i < train_data.size(0) - 1; i += bptt) {
        auto [input, targets] = get_batch(train_data, i, bptt);
        model->zero_grad();
        Tensor loss = criterion(run(input), targets);
        loss.backward();
        // clip_grad_norm helps prevent the exploding gradient problem in RNNs / LSTMs.
        ember::optim::clip_grad_norm_(model->parameters(), clip);
        {
          ember::NoGradGuard no_grad;
          for (const Tensor& p : model->parameters()) p.add_(p.grad() * -lr);
        }
        total_loss += loss.item<double>();
        ++batches;
        if (flags.dry_run) break;
      }
      const double val_loss = evaluate(val_data);
      std::printf("| end of epoch %3lld | train loss %5.2f | valid loss %5.2f | valid ppl %8.2f | lr %g\n", static_cast<long long>(epoch),
                  total_loss / batches, val_loss, std::exp(val_loss), lr);
      if (val_loss < best_val_loss) {
        best_val_loss = val_loss;
      } else {
        lr /= 4.0;  // anneal the learning rate if no improvement has been seen in the validation set
      }
      if (flags.dry_run) break;
    }
    const double test_loss = evaluate(test_data);
    std::printf("| End of training | test loss %5.2f | test ppl %8.2f\n", test_loss, std::exp(test_loss));
    return 0;
  });
}
